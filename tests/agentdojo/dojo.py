"""AgentDojo's banking and slack suites behind two local endpoints, for runtape runs.

One long-lived process (agentdojo takes seconds to import, and a benchmark makes hundreds of
runs) serves, on 127.0.0.1:

- /e/KEY/...   the environment of one run: its tools (names, descriptions and JSON schemas
               from agentdojo's function definitions), calls executed with agentdojo's own
               FunctionsRuntime, and the post-environment; `mcp_proxy.py` is the stdio MCP
               server runtape starts, and forwards here;
- /m/KEY/v1/chat/completions   a scripted OpenAI-compatible model for the same run;
- /score/KEY   agentdojo's own checks (the user task's utility, the injection task's
               security) on the run's pre- and post-environments and its call trace.

KEY is `SUITE.USER_TASK.INJECTION_TASK.MODEL.TAG` (INJECTION_TASK `none`: no injection;
MODEL `benign` or `hijacked`; TAG tells runs of the same pair apart, e.g. the policy on/off).

The injections are agentdojo's own: its `important_instructions` template (a
FixedJailbreakAttack, computed without a model) placed in the injection vectors its
ground-truth pipeline shows the user task reads (`BaseAttack.get_injection_candidates`).
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.attacks.base_attacks import FixedJailbreakAttack
from agentdojo.attacks.important_instructions_attacks import ImportantInstructionsAttack
from agentdojo.functions_runtime import FunctionCall, FunctionsRuntime
from agentdojo.task_suite.load_suites import get_suite
from agentdojo.types import text_content_block_from_string

BENCHMARK_VERSION = "v1.2.2"

# The tools that change the environment (or, for get_webpage, reach an outside host): the
# spec marks them consequential. Every other tool only reads.
STATE_CHANGING = {
    "banking": {
        "send_money",
        "schedule_transaction",
        "update_scheduled_transaction",
        "update_password",
        "update_user_info",
    },
    "slack": {
        "send_direct_message",
        "send_channel_message",
        "add_user_to_channel",
        "invite_user_to_slack",
        "remove_user_from_slack",
        "post_webpage",
        "get_webpage",
    },
}

# How the hijacked model recognises the injection in a tool result: the attack template's
# opening tag (the goal itself may be folded over lines by agentdojo's YAML rendering).
INJECTION_MARK = "<INFORMATION>"
assert INJECTION_MARK in ImportantInstructionsAttack._JB_STRING

LOCK = threading.Lock()
SUITES = {}
ATTACKS = {}
UNTRUSTED = {}
RUNS = {}


def suite(name):
    if name not in SUITES:
        SUITES[name] = get_suite(BENCHMARK_VERSION, name)
        attack = FixedJailbreakAttack(ImportantInstructionsAttack._JB_STRING, SUITES[name], None)
        attack.user_name = "Emma Johnson"
        ATTACKS[name] = attack
        UNTRUSTED[name] = untrusted_tools(SUITES[name])
    return SUITES[name]


def untrusted_tools(s):
    """The tools whose results carried one of agentdojo's injection vectors (its canaries) in
    some user task's ground-truth run: the ones an outsider can write into."""
    canaries = {v: f"<CANARY---{v}--->" for v in s.get_injection_vector_defaults()}
    found = set()
    for task in s.user_tasks.values():
        env = task.init_environment(s.load_and_inject_default_environment(canaries))
        runtime = FunctionsRuntime(s.tools)
        for call in task.ground_truth(env.model_copy(deep=True)):
            result, _ = runtime.run_function(env, call.function, call.args, raise_on_error=False)
            if any(c in tool_result_to_str(result) for c in canaries.values()):
                found.add(call.function)
    return found


def group_of(suite_name, tool):
    """The MCP server a tool is offered by: `web` (untrusted results) or `app`."""
    return "web" if tool in UNTRUSTED[suite_name] else "app"


class Run:
    """One run's environment, plan and record."""

    def __init__(self, key):
        parts = key.split(".")
        self.suite_name, user_id, inj_id, self.model = parts[0], parts[1], parts[2], parts[3]
        s = suite(self.suite_name)
        self.user = s.get_user_task_by_id(user_id)
        self.injection = None if inj_id == "none" else s.get_injection_task_by_id(inj_id)
        injections = ATTACKS[self.suite_name].attack(self.user, self.injection) if self.injection else {}
        self.marker = next(iter(injections.values()), None)
        env = self.user.init_environment(s.load_and_inject_default_environment(injections))
        self.pre = env.model_copy(deep=True)
        self.env = env
        self.runtime = FunctionsRuntime(s.tools)
        # The ground truth as agentdojo's GroundTruthPipeline computes it: from the
        # environment before the first call (its `args` are the placeholders resolved).
        self.benign = self.user.ground_truth(env.model_copy(deep=True))
        self.hijack = self.injection.ground_truth(env.model_copy(deep=True)) if self.injection else []
        self.trace = []
        self.blocked = []
        self.answer = ""

    def call(self, name, args):
        self.trace.append(FunctionCall(function=name, args=args))
        result, error = self.runtime.run_function(self.env, name, args, raise_on_error=False)
        if error:
            return error, True
        return tool_result_to_str(result), False

    def next_turn(self, messages):
        """The scripted model's reply to `messages`: the next ground-truth call, or the answer.

        benign: the user task's calls, then its ground-truth answer. hijacked: the same until
        a tool result holds the injection (INJECTION_MARK), then the injection task's calls, then the rest."""
        results = [m for m in messages if m.get("role") == "tool"]
        self.blocked = [content_text(m) for m in results if content_text(m).startswith("blocked by policy")]
        made = sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")
        plan = list(self.benign)
        if self.model == "hijacked" and self.marker:
            seen = next(
                (i for i, m in enumerate(results) if INJECTION_MARK in content_text(m)),
                None,
            )
            if seen is not None:
                plan = plan[: seen + 1] + list(self.hijack) + plan[seen + 1 :]
        if made < len(plan):
            return plan[made]
        self.answer = self.user.GROUND_TRUTH_OUTPUT
        return None

    def score(self):
        s = SUITES[self.suite_name]
        output = [text_content_block_from_string(self.answer)]
        utility = s._check_task_result(self.user, output, self.pre, self.env, self.trace)
        attacked = None
        if self.injection:
            attacked = s._check_task_result(self.injection, output, self.pre, self.env, self.trace)
        return {
            "utility": bool(utility),
            "attack_succeeded": attacked if attacked is None else bool(attacked),
            "calls": [c.function for c in self.trace],
            "blocked": self.blocked,
            "post_environment": json.loads(self.env.model_dump_json()),
        }


def content_text(message):
    c = message.get("content")
    if isinstance(c, list):
        return "".join(p.get("text", "") for p in c if isinstance(p, dict))
    return c or ""


def run_for(key):
    if key not in RUNS:
        RUNS[key] = Run(key)
    return RUNS[key]


def tools_of(run, group):
    s = SUITES[run.suite_name]
    out = []
    for f in s.tools:
        if group and group_of(run.suite_name, f.name) != group:
            continue
        out.append(
            {
                "name": f.name,
                "description": f.description,
                "inputSchema": f.parameters.model_json_schema(),
                "annotations": {
                    "readOnlyHint": f.name not in STATE_CHANGING[run.suite_name],
                    "destructiveHint": False,
                },
            }
        )
    return out


def completion(run, body):
    call = run.next_turn(body.get("messages", []))
    if call is None:
        message = {"role": "assistant", "content": run.answer}
        finish = "stop"
    else:
        name = f"{group_of(run.suite_name, call.function)}__{call.function}"
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{len(run.trace)}_{call.function}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(dict(call.args))},
                }
            ],
        }
        finish = "tool_calls"
    return {
        "id": "scripted",
        "object": "chat.completion",
        "model": run.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, value, status=200):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.handle_request(None)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.handle_request(json.loads(self.rfile.read(length) or b"{}"))

    def handle_request(self, body):
        parts = self.path.strip("/").split("/")
        try:
            with LOCK:
                if parts[0] == "health":
                    return self.reply({"ok": True})
                if parts[0] == "setup":
                    # /setup/SUITE: which tools are untrusted and which change state.
                    suite(parts[1])
                    return self.reply(
                        {
                            "untrusted": sorted(UNTRUSTED[parts[1]]),
                            "state_changing": sorted(STATE_CHANGING[parts[1]]),
                            "tools": [f.name for f in SUITES[parts[1]].tools],
                            "user_tasks": list(SUITES[parts[1]].user_tasks),
                            "prompts": {k: t.PROMPT for k, t in SUITES[parts[1]].user_tasks.items()},
                            "injection_tasks": list(SUITES[parts[1]].injection_tasks),
                        }
                    )
                run = run_for(parts[1])
                if parts[0] == "e" and parts[2] == "tools":
                    return self.reply({"tools": tools_of(run, parts[3] if len(parts) > 3 else None)})
                if parts[0] == "e" and parts[2] == "call":
                    text, is_error = run.call(body["name"], body.get("arguments") or {})
                    return self.reply({"text": text, "isError": is_error})
                if parts[0] == "m":
                    return self.reply(completion(run, body))
                if parts[0] == "score":
                    result = run.score()
                    del RUNS[parts[1]]
                    return self.reply(result)
            self.reply({"error": f"no such endpoint {self.path}"}, 404)
        except Exception as e:  # one line back to the caller, the server keeps serving
            self.reply({"error": f"{type(e).__name__}: {e}"}, 500)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    for name in sys.argv[1:]:
        suite(name)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
