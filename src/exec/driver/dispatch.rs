//! Dispatching the effects of a durable transition: each becomes a future in flight (a model
//! call, a tool call, a reconcile question) or a notice (a person is asked).

use std::sync::Arc;

use super::Driver;
use crate::exec::perform::{self, Completion, LeaseTerms, ToolJob};
use crate::exec::read_lock;
use crate::exec::reads::off_thread;
use crate::exec::trace::Trace;
use crate::ledger::conversation as conversation_of;
use crate::machine::{AgentId, Effect, EventBody, InputKind};
use crate::provider::{ProviderRequest, ToolDef};

impl Driver {
    /// Starts `effect`. Call it only once the transition that emitted it is durable.
    pub(in crate::exec) async fn perform(&mut self, effect: Effect) {
        self.order.started(&effect);
        match effect {
            Effect::CallModel {
                id,
                agent,
                request,
                attempt,
                not_before,
            } => {
                let provider = read_lock(&self.shared.providers)
                    .get(&request.provider)
                    .cloned();
                // A session summary (revision 5) sends the summarisation exchange, kept apart
                // from every agent's conversation; a context summary is built from the
                // summarised agent's.
                let key = request.conversation_owner(&agent);
                let mut messages = match self.messages_of(&key, &request.conversation).await {
                    Ok(m) => m,
                    Err(e) => {
                        self.inflight
                            .push(Box::pin(futures_util::future::ready(Completion::Fatal(e))));
                        return;
                    }
                };
                if request.memory.is_some()
                    || !request.compacted.is_empty()
                    || request.summarized.is_some()
                    || request.summarize.is_some()
                {
                    // Compactions and summaries for the context window, then injected memory
                    // (revision 5), exactly as the request recorded them.
                    request.complete_messages(Arc::make_mut(&mut messages));
                }
                let files = match self.files_of(&messages).await {
                    Ok(f) => f,
                    Err(e) => {
                        self.inflight
                            .push(Box::pin(futures_util::future::ready(Completion::Fatal(e))));
                        return;
                    }
                };
                if let Some(p) = &provider {
                    self.warn_unsent(
                        id.seq,
                        &agent,
                        p.as_ref(),
                        &request.model,
                        &messages,
                        &files,
                    );
                }
                let path = match self.tree_path().await {
                    Ok(p) => p,
                    Err(e) => {
                        self.inflight
                            .push(Box::pin(futures_util::future::ready(Completion::Fatal(e))));
                        return;
                    }
                };
                let tools = self.tool_defs_for(&agent, &request.tools);
                let spec_agent = self.spec.agent(&agent);
                let req = ProviderRequest {
                    settings: request.settings(spec_agent),
                    // A session summary is plain text whatever the agent answers with.
                    output_schema: spec_agent
                        .filter(|_| !request.summary)
                        .and_then(|a| a.output_schema.clone()),
                    agent,
                    model: request.model,
                    messages,
                    tools,
                    remaining: request.remaining,
                    attempt,
                    origin: crate::provider::RequestOrigin {
                        run: Some(self.run.clone()),
                        path,
                    },
                    files,
                };
                let call = perform::model_call(
                    id,
                    provider,
                    request.provider,
                    req,
                    not_before,
                    self.shared.trace.clone(),
                    self.shared.config.clock.clone(),
                );
                // A model call abandoned by a stop or a lost lease ends at once (a provider
                // need not watch for cancellation itself); it is asked again on resume.
                let cancel = self.cancel.child_token();
                self.inflight.push(Box::pin(async move {
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => Completion::Abandoned,
                        done = call => done,
                    }
                }));
            }
            Effect::CallTool {
                id,
                agent,
                call_id,
                tool,
                args,
                idempotency_key,
            } => {
                self.emit(Some(id.seq), || Trace::ToolCall {
                    agent: agent.clone(),
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    args: args.clone(),
                });
                let job = self.tool_job(id, agent, call_id, tool, args, idempotency_key);
                self.inflight
                    .push(perform::tool_call(self.shared.writes.clone(), job));
            }
            Effect::Reconcile {
                id,
                agent,
                call_id,
                tool,
                args,
                idempotency_key,
            } => {
                self.emit(Some(id.seq), || Trace::ToolReconcile {
                    agent: agent.clone(),
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                });
                let job = self.tool_job(id, agent, call_id, tool, args, idempotency_key);
                self.inflight.push(perform::reconcile_call(job));
            }
            Effect::Retrieve {
                id,
                agent,
                conversation,
                turn,
            } => {
                self.emit(Some(id.seq), || Trace::RetrievalCall {
                    agent: agent.clone(),
                    turn,
                });
                let messages = match self.messages_of(&agent, &conversation).await {
                    Ok(m) => m,
                    Err(e) => {
                        self.inflight
                            .push(Box::pin(futures_util::future::ready(Completion::Fatal(e))));
                        return;
                    }
                };
                let goal = self
                    .state
                    .data()
                    .map(|d| d.goal.clone())
                    .unwrap_or_default();
                let session = self.spec.spec().session.as_ref().map(|s| s.name.clone());
                let query = crate::tool::retriever::query(
                    id.run.as_str(),
                    agent.as_str(),
                    &goal,
                    turn,
                    session.as_deref(),
                    &messages,
                );
                // A replay answers from its recording; one it cannot answer stops the run.
                let recorded = read_lock(&self.shared.retrieval_source).clone();
                if let Some(source) = recorded {
                    let done = match self.tree_path().await {
                        Err(e) => Completion::Fatal(e),
                        Ok(path) => match source.retrieve(&path, &query) {
                            Ok(retrieval) => Completion::Event(EventBody::Retrieved {
                                effect: id,
                                retrieval,
                            }),
                            Err(reason) => Completion::Event(EventBody::CancelRequested {
                                reason: Some(reason),
                            }),
                        },
                    };
                    self.inflight
                        .push(Box::pin(futures_util::future::ready(done)));
                    return;
                }
                let retriever = read_lock(&self.shared.retriever).clone();
                let ctx = crate::tool::ToolContext {
                    run_id: id.run.clone(),
                    agent,
                    call_id: format!("retrieve-{}-{}", id.seq, id.index),
                    idempotency_key: id.idempotency_key(),
                    lease_epoch: self.epoch(),
                    cancel: self.cancel.child_token(),
                };
                let clock = self.shared.config.clock.clone();
                let default = self.shared.config.tool_timeout;
                self.inflight
                    .push(perform::retrieve(id, retriever, query, ctx, clock, default));
            }
            Effect::PublishMemory { id, name, writes } => {
                self.publish_memory(id, name, writes).await;
            }
            Effect::StartTimer {
                id,
                agent,
                call_id,
                due,
            } => self.start_timer(id, agent, call_id, due),
            effect @ Effect::RunChild { .. } => {
                let child = crate::exec::child_run::run_child(
                    self.shared.clone(),
                    self.spec.clone(),
                    effect,
                );
                self.inflight.push(child);
            }
            Effect::RequestInput {
                id,
                agent,
                call_id,
                request,
            } => {
                let kind = match request.kind {
                    InputKind::Approval => "approval",
                    InputKind::Question => "question",
                    InputKind::InDoubt => "in_doubt",
                };
                self.emit(Some(id.seq), move || Trace::InputRequested {
                    agent,
                    call_id,
                    tool: request.tool,
                    kind: kind.into(),
                });
            }
        }
    }

    /// `agent`'s conversation up to `conversation`: from this driver's copy, else read from
    /// the store (a resumed run loads conversations on first use; a fork's copy may lack a
    /// session's summarisation exchange).
    pub(super) async fn messages_of(
        &mut self,
        agent: &AgentId,
        conversation: &crate::machine::ConversationRef,
    ) -> Result<Arc<Vec<crate::machine::Message>>, crate::exec::EngineError> {
        let known = self.convs.get(agent).map_or(0, |m| m.len());
        if known < conversation.len as usize {
            let (who, conv) = (agent.clone(), *conversation);
            let list =
                off_thread(&self.shared.store, move |s| conversation_of(s, &who, &conv)).await?;
            self.convs.insert(agent.clone(), Arc::new(list));
        }
        let mut messages = self.convs.get(agent).cloned().unwrap_or_default();
        if messages.len() > conversation.len as usize {
            messages = Arc::new(messages[..conversation.len as usize].to_vec());
        }
        Ok(messages)
    }

    /// This run's place in its delegation tree (`""` for a run nobody delegated, which its
    /// spec says without a read), read once.
    pub(super) async fn tree_path(&mut self) -> Result<String, crate::exec::EngineError> {
        if let Some(p) = &self.tree_path {
            return Ok(p.clone());
        }
        if self.spec.spec().delegated_by.is_none() {
            // What `path_of` finds for a run whose stored spec names no delegating effect (the
            // spec it runs under is the stored one, checked against its head when taken up).
            self.tree_path = Some(String::new());
            return Ok(String::new());
        }
        let run = self.run.clone();
        let p = off_thread(&self.shared.store, move |s| crate::ledger::path_of(s, &run)).await?;
        self.tree_path = Some(p.clone());
        Ok(p)
    }

    /// Everything a tool call (or reconcile question) needs to run on its own.
    fn tool_job(
        &self,
        id: crate::machine::EffectId,
        agent: AgentId,
        call_id: String,
        tool: String,
        args: serde_json::Value,
        idempotency_key: String,
    ) -> ToolJob {
        ToolJob {
            tool: read_lock(&self.shared.tools).get(&tool).cloned(),
            id,
            agent,
            call_id,
            tool_name: tool,
            args,
            idempotency_key,
            epoch: self.epoch(),
            head: self.head.clone(),
            timeout: self.shared.config.tool_timeout,
            cancel: self.cancel.child_token(),
            lease: LeaseTerms {
                clock: self.shared.config.clock.clone(),
                ttl: self.shared.config.lease_ttl,
            },
        }
    }

    /// The tools `agent` is offered, as the provider sees them: built once per agent, and
    /// again when the offered names change (an MCP server's list changed, revision 3).
    fn tool_defs_for(&mut self, agent: &AgentId, names: &[String]) -> Vec<ToolDef> {
        // A tool a server added (revision 4) can change its definition under the same name;
        // its definition then comes from a new list, so the cache is dropped on every list.
        if let Some((built_for, defs)) = self.tool_defs.get(agent)
            && built_for.as_slice() == names
        {
            return defs.clone();
        }
        let run = self.state.data();
        let defs: Vec<ToolDef> = names
            .iter()
            .filter_map(|n| {
                // A tool an MCP server added (revision 4) is known from the run's recorded
                // lists; a delegate or transfer tool from the spec's agents.
                let listed = match run {
                    Some(data) => crate::machine::offered_tool(&self.spec, data, n),
                    None => self.spec.tool(n),
                };
                match listed {
                    Some(t) => Some(std::borrow::Cow::Borrowed(t)),
                    None => self.spec.offered_tool(n),
                }
            })
            .map(|t| ToolDef {
                name: t.name.clone(),
                description: t.description.clone(),
                schema: t.schema.clone(),
            })
            .collect();
        self.tool_defs
            .insert(agent.clone(), (names.to_vec(), defs.clone()));
        defs
    }
}
