//! Shared test support: spec fixtures and a deterministic driver for the pure machine.
#![allow(dead_code, unreachable_pub)]

use runtape::machine::*;
use serde_json::{Value, json};

/// The clock every harness starts at, in ms; each event advances it by `TICK_MS`.
pub const T0_MS: u64 = 1_000;
/// Milliseconds between events.
pub const TICK_MS: u64 = 10;

/// Tools used across the fixtures.
pub fn tools() -> Vec<ToolSpec> {
    let q_schema = json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": false});
    vec![
        ToolSpec {
            read_only: true,
            idempotent: true,
            schema: q_schema.clone(),
            ..ToolSpec::new("lookup", "Look something up")
        },
        ToolSpec {
            schema: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            ..ToolSpec::new("write", "Append text to the notes file")
        },
        ToolSpec {
            requires_approval: true,
            ..ToolSpec::new("deploy", "Deploy (a person must approve)")
        },
        ToolSpec {
            interactive: true,
            schema: json!({"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}),
            ..ToolSpec::new("ask_human", "Ask a person")
        },
        ToolSpec {
            read_only: true,
            ..ToolSpec::new("secret", "Exists, but is granted to nobody here")
        },
    ]
}

/// One agent with two routes and four tools granted (`secret` is not).
pub fn solo_agent() -> AgentSpec {
    AgentSpec {
        system_prompt: "You are a careful assistant.".into(),
        routes: vec![
            Route {
                max_attempts: 2,
                backoff: Backoff {
                    initial_ms: 100,
                    max_ms: 1_000,
                },
                ..Route::new("primary", "model-a")
            },
            Route {
                max_attempts: 1,
                ..Route::new("fallback", "model-b")
            },
        ],
        tools: Some(vec![
            "lookup".into(),
            "write".into(),
            "deploy".into(),
            "ask_human".into(),
        ]),
        ..AgentSpec::new("solo", "primary", "model-a")
    }
}

/// A single-agent spec.
pub fn solo() -> RunSpec {
    solo_with(|_| {})
}

/// A single-agent spec, adjusted by `f`.
pub fn solo_with(f: impl FnOnce(&mut Spec)) -> RunSpec {
    let mut spec = Spec {
        agents: vec![solo_agent()],
        tools: tools(),
        ..Spec::default()
    };
    f(&mut spec);
    RunSpec::build(spec).expect("fixture spec is valid")
}

fn plain_agent(id: &str) -> AgentSpec {
    AgentSpec {
        system_prompt: format!("You are {id}."),
        tools: Some(vec!["lookup".into()]),
        ..AgentSpec::new(id, "primary", "model-a")
    }
}

/// researcher → writer when the answer contains "FOUND", researcher → fallback otherwise;
/// writer and fallback are exits.
pub fn pair() -> RunSpec {
    let spec = Spec {
        agents: vec![
            plain_agent("researcher"),
            plain_agent("writer"),
            plain_agent("apology"),
        ],
        tools: tools(),
        plan: plan(
            "researcher",
            vec![
                edge("researcher", "writer", when_contains("FOUND")),
                edge("researcher", "apology", When::Always),
            ],
            &["writer", "apology"],
            8,
        ),
        ..Spec::default()
    };
    RunSpec::build(spec).expect("fixture spec is valid")
}

/// a → b (regex ^left) | a → c (always); b → d; c → d; d is the exit.
pub fn diamond() -> RunSpec {
    let spec = Spec {
        agents: ["a", "b", "c", "d"].into_iter().map(plain_agent).collect(),
        tools: tools(),
        plan: plan(
            "a",
            vec![
                edge(
                    "a",
                    "b",
                    When::Regex {
                        pattern: "^left".into(),
                    },
                ),
                edge("a", "c", When::Always),
                edge("b", "d", When::Always),
                edge("c", "d", When::Always),
            ],
            &["d"],
            1,
        ),
        ..Spec::default()
    };
    RunSpec::build(spec).expect("fixture spec is valid")
}

/// ping ⇄ pong; pong exits only when its answer is JSON with {"done": true}.
pub fn cycle(max_visits: u32) -> RunSpec {
    let spec = Spec {
        agents: vec![plain_agent("ping"), plain_agent("pong")],
        tools: tools(),
        plan: Some(Plan {
            entry: "ping".into(),
            edges: vec![
                PlanEdge {
                    from: "ping".into(),
                    to: "pong".into(),
                    when: When::Always,
                },
                PlanEdge {
                    from: "pong".into(),
                    to: "ping".into(),
                    when: When::JsonPointerEquals {
                        pointer: "/done".into(),
                        value: json!(false),
                    },
                },
            ],
            exits: vec!["pong".into()],
            max_agent_visits: max_visits,
        }),
        ..Spec::default()
    };
    RunSpec::build(spec).expect("fixture spec is valid")
}

/// A plan starting at `entry` that ends at any of `exits`, each agent visited at most
/// `max_agent_visits` times; what a spec's `[plan]` table builds.
pub fn plan(
    entry: &str,
    edges: Vec<PlanEdge>,
    exits: &[&str],
    max_agent_visits: u32,
) -> Option<Plan> {
    Some(Plan {
        entry: entry.into(),
        edges,
        exits: exits.iter().map(|&e| e.into()).collect(),
        max_agent_visits,
    })
}

/// The plan edge `from → to`, taken when `when` holds of `from`'s answer.
pub fn edge(from: &str, to: &str, when: When) -> PlanEdge {
    PlanEdge {
        from: from.into(),
        to: to.into(),
        when,
    }
}

/// The condition that `text` is in the answer (`when = { contains = "…" }`).
pub fn when_contains(text: &str) -> When {
    When::Contains { text: text.into() }
}

/// One tool call.
pub fn call(id: &str, name: &str, args: Value) -> ToolCallRequest {
    ToolCallRequest::new(id, name, args)
}

/// The outcome of a run that completed with the text answer `answer` (no structured output).
pub fn answered(answer: &str) -> Outcome {
    Outcome::Completed {
        answer: Some(answer.into()),
        output: None,
    }
}

/// The failure a run ended with, for a test that expects the run to have failed; panics with
/// the state it is in otherwise.
pub fn failure(state: &RunState) -> &Failure {
    match state.outcome() {
        Some(Outcome::Failed { error }) => error,
        _ => panic!("expected a failed run, got {state:?}"),
    }
}

/// Drives the machine one event at a time and records every transition.
pub struct Harness {
    pub spec: RunSpec,
    pub run: RunId,
    pub state: RunState,
    pub clock: u64,
    pub history: Vec<(Event, Transition)>,
    pub conversations: Conversations,
}

impl Harness {
    pub fn new(spec: RunSpec) -> Self {
        Harness {
            spec,
            run: RunId::new("run-1"),
            state: RunState::Created,
            clock: T0_MS,
            history: Vec::new(),
            conversations: Conversations::new(),
        }
    }

    /// The event `body` would be, stamped with the next tick.
    pub fn event(&mut self, body: EventBody) -> Event {
        self.clock += TICK_MS;
        Event::new(&self.run, Hlc::from_ms(self.clock), body)
    }

    /// Applies `body`; panics (test failure) if the machine refuses it.
    pub fn send(&mut self, body: EventBody) -> &Transition {
        let kind = body.kind();
        match self.try_send(body) {
            Ok(_) => &self.history.last().expect("just pushed").1,
            Err(e) => panic!("{kind} refused in {}: {e}", self.state.kind()),
        }
    }

    /// The edge the last event took (`""` before any event).
    pub fn last_edge(&self) -> &'static str {
        self.history.last().map_or("", |(_, t)| t.edge.as_str())
    }

    /// Applies `body`, returning the machine's error without changing anything.
    pub fn try_send(&mut self, body: EventBody) -> Result<(), MachineError> {
        let event = self.event(body);
        let t = step(&self.state, &event, &self.spec)?;
        for a in &t.appended {
            self.conversations
                .apply(a)
                .expect("appended messages are contiguous");
        }
        self.state = t.next.clone();
        self.history.push((event, t));
        Ok(())
    }

    pub fn start(&mut self, goal: &str) -> &Transition {
        self.send(EventBody::Start { goal: goal.into() })
    }

    pub fn proceed(&mut self) -> &Transition {
        self.send(EventBody::Proceed)
    }

    /// Begins a session run with the history `seed` carries.
    pub fn session_start(&mut self, goal: &str, seed: SessionSeed) -> &Transition {
        self.send(EventBody::SessionStart {
            goal: goal.into(),
            seed,
        })
    }

    /// The outstanding `Retrieve` effect's id.
    pub fn retrieve_effect(&self) -> EffectId {
        match &self.state {
            RunState::Retrieving { effect, .. } => effect.in_run(&self.run),
            s => panic!("no retrieval outstanding in {}", s.kind()),
        }
    }

    /// Answers the outstanding `Retrieve`.
    pub fn retrieved(&mut self, retrieval: Retrieval) -> &Transition {
        let effect = self.retrieve_effect();
        self.send(EventBody::Retrieved { effect, retrieval })
    }

    /// The outstanding model call's effect id (an agent's turn or a session summary).
    pub fn model_effect(&self) -> EffectId {
        match &self.state {
            RunState::Generating { call, .. } | RunState::Summarizing { call, .. } => {
                call.effect.in_run(&self.run)
            }
            s => panic!("no model call outstanding in {}", s.kind()),
        }
    }

    /// The outstanding effect of the batch slot with `call_id`.
    pub fn slot_effect(&self, call_id: &str) -> EffectId {
        match &self.state {
            RunState::CallingTools { batch, .. } | RunState::AwaitingInput { batch, .. } => batch
                .slots
                .iter()
                .find(|s| s.call_id == call_id)
                .and_then(|s| s.status.effect())
                .unwrap_or_else(|| panic!("call {call_id} has nothing outstanding"))
                .in_run(&self.run),
            s => panic!("no tool batch in {}", s.kind()),
        }
    }

    pub fn reply(&mut self, reply: ModelReply) -> &Transition {
        let effect = self.model_effect();
        self.send(EventBody::ModelReplied {
            effect,
            reply,
            chunks: Vec::new(),
        })
    }

    pub fn fail(&mut self, failure: ModelFailure) -> &Transition {
        let effect = self.model_effect();
        self.send(EventBody::ModelFailed { effect, failure })
    }

    pub fn tool_ok(&mut self, call_id: &str, value: Value) -> &Transition {
        let effect = self.slot_effect(call_id);
        self.send(EventBody::ToolReturned {
            effect,
            outcome: ToolOutcome::ok(value),
        })
    }

    pub fn tool_err(&mut self, call_id: &str, message: &str) -> &Transition {
        let effect = self.slot_effect(call_id);
        self.send(EventBody::ToolReturned {
            effect,
            outcome: ToolOutcome::Error {
                message: message.into(),
            },
        })
    }

    pub fn input(&mut self, call_id: &str, input: HumanInput) -> &Transition {
        let effect = self.slot_effect(call_id);
        self.send(EventBody::InputProvided { effect, input })
    }

    pub fn in_doubt(&mut self, call_id: &str) -> &Transition {
        let effect = self.slot_effect(call_id);
        self.send(EventBody::EffectInDoubt { effect })
    }

    pub fn raise(&mut self, scope: Scope, key: BudgetKey, limit: u64) -> &Transition {
        self.send(EventBody::BudgetRaised { scope, key, limit })
    }

    pub fn cancel(&mut self) -> &Transition {
        self.send(EventBody::CancelRequested {
            reason: Some("test".into()),
        })
    }

    /// Answers with a tool-call reply, then runs each call with `result`.
    pub fn tool_round(&mut self, calls: Vec<ToolCallRequest>) {
        let ids: Vec<String> = calls
            .iter()
            .map(|c| c.id.clone().unwrap_or_default())
            .collect();
        self.proceed();
        self.reply(ModelReply::tools(calls).with_usage(10, 5));
        for id in ids {
            if matches!(self.state, RunState::CallingTools { .. }) {
                self.tool_ok(&id, json!({"ok": id}));
            }
        }
    }

    /// One row per transition, for scenario snapshots.
    pub fn rows(&self) -> Vec<Row> {
        self.history
            .iter()
            .map(|(event, t)| Row {
                seq: t.next.seq(),
                event: event.kind(),
                edge: t.edge.as_str(),
                to: t.next.kind(),
                effects: t.effects.iter().map(effect_summary).collect(),
                notes: t.notes.clone(),
                hash: t.next.state_hash(self.spec.history_hash()).to_hex()[..12].to_owned(),
            })
            .collect()
    }

    /// Everything a scenario snapshot pins: the rows, the final state, and the conversations.
    pub fn scenario(&self) -> Scenario {
        Scenario {
            transitions: self.rows(),
            final_state: self.state.clone(),
            conversations: self.conversations.all().clone(),
        }
    }
}

/// One line of a scenario snapshot.
#[derive(serde::Serialize)]
pub struct Row {
    pub seq: u64,
    pub event: EventKind,
    pub edge: &'static str,
    pub to: StateKind,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Note>,
    pub hash: String,
}

/// A whole-run snapshot.
#[derive(serde::Serialize)]
pub struct Scenario {
    pub transitions: Vec<Row>,
    pub final_state: RunState,
    pub conversations: std::collections::BTreeMap<AgentId, Vec<Message>>,
}

/// A one-line description of an effect.
pub fn effect_summary(e: &Effect) -> String {
    match e {
        Effect::CallModel {
            id,
            agent,
            request,
            attempt,
            not_before,
        } => format!(
            "{id} CallModel {agent} via {}/{} attempt {attempt}{} ({} messages, tools [{}])",
            request.provider,
            request.model,
            not_before
                .map(|t| format!(" not before {t}"))
                .unwrap_or_default(),
            request.conversation.len,
            request.tools.join(", ")
        ),
        Effect::CallTool {
            id,
            call_id,
            tool,
            args,
            idempotency_key,
            ..
        } => {
            format!("{id} CallTool {tool} {call_id} {args} key {idempotency_key}")
        }
        Effect::Reconcile {
            id,
            call_id,
            tool,
            idempotency_key,
            ..
        } => {
            format!("{id} Reconcile {tool} {call_id} key {idempotency_key}")
        }
        Effect::RequestInput {
            id,
            call_id,
            request,
            ..
        } => {
            format!(
                "{id} RequestInput {:?} {} {call_id}",
                request.kind, request.tool
            )
        }
        Effect::RunChild {
            id,
            call_id,
            delegate,
            task,
            limits,
            depth,
            ..
        } => format!(
            "{id} RunChild {delegate} {call_id} depth {depth} turns {:?} task {task:?}",
            limits.max_turns
        ),
        Effect::PublishMemory { id, name, writes } => {
            let keys: Vec<String> = writes
                .iter()
                .map(|(k, w)| format!("{k}@{}", w.base))
                .collect();
            format!("{id} PublishMemory {name} [{}]", keys.join(", "))
        }
        Effect::Retrieve {
            id,
            agent,
            conversation,
            turn,
        } => format!(
            "{id} Retrieve {agent} turn {turn} ({} messages)",
            conversation.len
        ),
        Effect::StartTimer {
            id,
            agent,
            call_id,
            due,
        } => format!("{id} StartTimer {agent} {call_id} due {due}"),
    }
}

/// The previous run a session fixture goes on from.
pub const PREVIOUS: &str = "prev-run";

/// `spec` as the third run of session `chat`, going on from [`PREVIOUS`] with `window`, its
/// summaries written by `summarizer` (each agent its own when `None`).
pub fn in_session(mut spec: Spec, window: SessionWindow, summarizer: Option<&str>) -> RunSpec {
    spec.session = Some(SessionSpec {
        name: "chat".into(),
        index: 3,
        previous: Some(RunId::new(PREVIOUS)),
        window,
        summarizer: summarizer.map(AgentId::from),
        replayed: false,
    });
    RunSpec::build(spec).expect("fixture spec is valid")
}

/// The single-agent spec with a retriever for `solo`.
pub fn with_retriever() -> RunSpec {
    solo_with(|s| {
        s.retriever = Some(RetrieverSpec {
            agents: Some(vec!["solo".into()]),
            results: Default::default(),
        })
    })
}

/// A conversation as a run ends it: the system prompt, then `turns` questions and answers.
pub fn chat(system: &str, turns: usize) -> Vec<Message> {
    let mut out = vec![Message::text(Role::System, system)];
    for i in 0..turns {
        out.push(Message::text(Role::User, format!("question {i}")));
        out.push(Message::text(Role::Assistant, format!("answer {i}")));
    }
    out
}

/// The history a session run carries from [`PREVIOUS`]: each agent's conversation, with the
/// reference its final state would hold.
pub fn seed(agents: Vec<(&str, Vec<Message>)>) -> SessionSeed {
    SessionSeed {
        previous: RunId::new(PREVIOUS),
        agents: agents
            .into_iter()
            .map(|(agent, messages)| {
                let ended_with = ConversationRef {
                    len: messages.len() as u32,
                    head: head_of(&messages),
                };
                (
                    AgentId::from(agent),
                    CarriedConversation {
                        ended_with,
                        messages,
                    },
                )
            })
            .collect(),
    }
}

/// Insta settings that store snapshots in the top-level `snapshots/` folder.
pub fn insta_settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_snapshot_path(concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots"));
    s.set_prepend_module_to_snapshot(false);
    s.set_omit_expression(true);
    s
}

/// Revision 4: `lead` (granted `lookup` and `deploy`) may delegate to `researcher` and
/// `coder` (each child gets half of what is left, at most 4 turns) and hand over to
/// `reviewer`, who may hand back to `lead`; `lead` is the plan's entry and exit.
pub fn team(max_agent_visits: u32) -> RunSpec {
    team_with(max_agent_visits, |_| {})
}

/// [`team`], changed by `f` before it is built (e.g. to pin an older revision).
pub fn team_with(max_agent_visits: u32, f: impl FnOnce(&mut Spec)) -> RunSpec {
    let mut lead = AgentSpec {
        system_prompt: "You lead.".into(),
        tools: Some(vec!["lookup".into(), "deploy".into()]),
        delegates: vec!["researcher".into(), "coder".into()],
        handoffs: vec!["reviewer".into()],
        limits: Limits {
            max_turns: Some(20),
            ..Limits::default()
        },
        ..AgentSpec::new("lead", "primary", "model-a")
    };
    lead.delegation.budget = ChildBudget {
        share_permille: Some(500),
        limits: Limits {
            max_turns: Some(4),
            ..Limits::default()
        },
    };
    let mut reviewer = plain_agent("reviewer");
    reviewer.handoffs = vec!["lead".into()];
    let mut spec = Spec {
        agents: vec![
            lead,
            plain_agent("researcher"),
            plain_agent("coder"),
            reviewer,
        ],
        tools: tools(),
        plan: Some(Plan {
            entry: "lead".into(),
            edges: Vec::new(),
            exits: vec!["lead".into()],
            max_agent_visits,
        }),
        ..Spec::default()
    };
    f(&mut spec);
    RunSpec::build(spec).expect("fixture spec is valid")
}

/// `lead` asks `agent` (`delegate_<agent>`) to do `task`.
pub fn delegate(id: &str, agent: &str, task: &str) -> ToolCallRequest {
    call(id, &format!("delegate_{agent}"), json!({"task": task}))
}

/// `solo` with `[memory]` (revision 5): global memory `team`, the shared and global scopes
/// injected, and the memory tools granted to the agent.
pub fn memory_solo() -> RunSpec {
    memory_solo_with(|_| {})
}

/// [`memory_solo`], adjusted by `f`.
pub fn memory_solo_with(f: impl FnOnce(&mut Spec)) -> RunSpec {
    solo_with(|s| {
        s.memory = Some(MemorySpec {
            global: Some("team".into()),
            inject: vec![MemoryScope::Shared, MemoryScope::Global],
            ..MemorySpec::default()
        });
        if let Some(tools) = s.agents[0].tools.as_mut() {
            tools.extend(["remember", "recall", "forget"].map(String::from));
        }
        f(s);
    })
}

/// A `remember` call.
pub fn remember(id: &str, key: &str, value: &str, scope: &str) -> ToolCallRequest {
    call(
        id,
        "remember",
        json!({"key": key, "value": value, "scope": scope}),
    )
}

impl Harness {
    /// The model's reply: one call of tool `name` with `args` (call id `id`); the transition.
    pub fn called(&mut self, id: &str, name: &str, args: Value) -> Transition {
        self.reply(ModelReply::tools(vec![call(id, name, args)]))
            .clone()
    }

    /// The store's refusal of the staged global write: `city` moved to version 3 ("Porto").
    pub fn city_moved(&self) -> EventBody {
        EventBody::MemoryPublished {
            effect: self.publish_effect(),
            outcome: PublishOutcome::Conflict {
                keys: [(
                    "city".to_owned(),
                    Versioned {
                        version: 3,
                        value: Some("Porto".into()),
                    },
                )]
                .into_iter()
                .collect(),
            },
            replayed: false,
        }
    }

    /// Records the run's view of global memory `team`: `(key, version, value)` each.
    pub fn load_memory(&mut self, entries: &[(&str, u64, Option<&str>)]) -> &Transition {
        let body = memory_loaded(entries);
        self.send(body)
    }

    /// The outstanding `PublishMemory` effect.
    pub fn publish_effect(&self) -> EffectId {
        match &self.state {
            RunState::Publishing { effect, .. } => effect.in_run(&self.run),
            s => panic!("not publishing in {}", s.kind()),
        }
    }

    /// Drives a started, loaded run through one turn that writes `key = value` to global
    /// memory and an answer, to `Handoff`.
    pub fn stage_global(&mut self, key: &str, value: &str) {
        self.proceed();
        self.reply(ModelReply::tools(vec![remember(
            "m1", key, value, "global",
        )]));
        self.proceed();
        self.reply(ModelReply::text("noted"));
    }
}

/// A `MemoryLoaded` event for global memory `team`.
pub fn memory_loaded(entries: &[(&str, u64, Option<&str>)]) -> EventBody {
    EventBody::MemoryLoaded {
        name: "team".into(),
        entries: entries
            .iter()
            .map(|(k, version, value)| {
                (
                    (*k).to_owned(),
                    Versioned {
                        version: *version,
                        value: value.map(str::to_owned),
                    },
                )
            })
            .collect(),
        replayed: false,
        from_ancestor: None,
    }
}

/// Whether transition `t` asks for a tool call to be performed.
pub fn calls_a_tool(t: &Transition) -> bool {
    effected(t, |e| matches!(e, Effect::CallTool { .. }))
}

/// Whether transition `t` asks for an effect that `is` holds for.
pub fn effected(t: &Transition, is: impl Fn(&Effect) -> bool) -> bool {
    t.effects.iter().any(is)
}

/// Whether transition `t` appends a message whose text is `text`.
pub fn appended_text(t: &Transition, text: &str) -> bool {
    t.appended
        .iter()
        .any(|a| a.message.content.as_deref() == Some(text))
}

/// Whether transition `t` carries a note that `is` holds for.
pub fn noted(t: &Transition, is: impl Fn(&Note) -> bool) -> bool {
    t.notes.iter().any(is)
}

/// The single-agent spec with `[timers]` (an hour at most) and `sleep_for` granted.
pub fn sleepy() -> RunSpec {
    solo_with(|s| {
        s.timers = Some(TimerSpec {
            max_sleep_ms: Some(3_600_000),
            ..TimerSpec::default()
        });
        if let Some(tools) = &mut s.agents[0].tools {
            tools.push("sleep_for".into());
        }
    })
}

/// A `sleep_for` call of `seconds`.
pub fn nap(id: &str, seconds: u64) -> ToolCallRequest {
    call(id, "sleep_for", json!({ "seconds": seconds }))
}

/// The firing of call `call_id`'s timer, at the due instant its slot recorded.
pub fn fired(h: &Harness, call_id: &str) -> EventBody {
    let due = match &h.state {
        RunState::CallingTools { batch, .. } => batch
            .slots
            .iter()
            .find_map(|s| match s.status {
                SlotStatus::Sleeping { due, .. } if s.call_id == call_id => Some(due),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{call_id} does not sleep")),
        s => panic!("no batch in {}", s.kind()),
    };
    EventBody::TimerFired {
        effect: h.slot_effect(call_id),
        due,
        early: false,
    }
}

/// The single-agent spec where a call of `tool` (`deploy` asks for an approval, `ask_human` a
/// question) waits at most 1 ms for a person, then `then` decides.
pub fn with_deadline(tool: &str, then: OnDeadline) -> RunSpec {
    solo_with(|s| {
        let deadline = Deadline { after_ms: 1, then };
        s.timers = Some(TimerSpec {
            deadlines: [(tool.to_owned(), deadline)].into_iter().collect(),
            ..TimerSpec::default()
        });
    })
}

/// A deadline policy that hands the call on to `to` for 1 ms, then `then` decides.
pub fn escalate(to: &str, then: OnDeadline) -> OnDeadline {
    OnDeadline::Escalate(Box::new(Escalation {
        to: to.to_owned(),
        after_ms: 1,
        then,
    }))
}

/// The firing of the deadline of call `call_id`, which waits for a person, at its due instant.
pub fn deadline_fired(h: &Harness, call_id: &str) -> EventBody {
    let timer = match &h.state {
        RunState::CallingTools { batch, .. } | RunState::AwaitingInput { batch, .. } => batch
            .slots
            .iter()
            .find(|s| s.call_id == call_id)
            .and_then(|s| s.deadline)
            .unwrap_or_else(|| panic!("{call_id} has no deadline")),
        s => panic!("no batch in {}", s.kind()),
    };
    EventBody::TimerFired {
        effect: timer.effect.in_run(&h.run),
        due: timer.due,
        early: false,
    }
}
