#!/usr/bin/env python3
"""runtape's W1 and W5 workloads on LangGraph with its async SQLite saver (AsyncSqliteSaver).

Not part of CI: `examples/compare/run.sh` makes a venv with the pinned requirements and runs
this. The workloads mirror `runtape bench` (src/bench/workload.rs, src/bench/w5.rs):

- W1: one run of R tool rounds (default 500) and a final answer; a scripted model with zero
  latency; every message exactly 200 bytes; a trivial in-process tool.
- W5: N runs (default 10,000) started together, each 3 tool rounds and a final answer; the
  model answers each turn after 1,000 ms +-20%, drawn from the same seeded generator as
  runtape's (so both sides wait for exactly the same latencies).

One graph: `model` (the scripted model) -> `tools` (the tool) -> `model` ... -> END, its state
`MessagesState` plus a turn counter, checkpointed by AsyncSqliteSaver on a file with the
library's defaults (WAL; the pragmas in effect are printed). A LangGraph checkpoint (one per
superstep) is counted as a transition. Reply-to-durable: from the model node's reply to the
first commit that holds it (the task's pending writes or the step's checkpoint, whichever
commits first). Each repetition runs in a child process of its own; figures are medians by
wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph

MESSAGE_BYTES = 200
SEED = 0x5EED_0005
MASK = (1 << 64) - 1


def text(tag: str) -> str:
    """A 200-byte text tagged with `tag` (as runtape's bench builds it)."""
    s = f"{tag} "
    while len(s) < MESSAGE_BYTES:
        s += "lorem ipsum "
    return s[:MESSAGE_BYTES]


def draw(run: int, turn: int) -> float:
    """Uniform in [0, 1) for (run, turn): splitmix64, bit for bit as src/bench/w5.rs."""
    z = SEED ^ ((run << 16) & MASK) ^ turn
    z = (z + 0x9E37_79B9_7F4A_7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & MASK
    z ^= z >> 31
    return (z >> 11) / float(1 << 53)


def latency_s(base_s: float, run: int, turn: int) -> float:
    return base_s * (0.8 + 0.4 * draw(run, turn))


def rss_bytes(key: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class State(MessagesState):
    turn: int


class Stamped(AsyncSqliteSaver):
    """The saver, counting its commits and noting when each reply is first durable."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.commits = 0
        self.checkpoints = 0
        self.replied: dict[str, list[float]] = {}
        self.samples: list[float] = []

    def _durable(self, config) -> None:
        self.commits += 1
        now = time.perf_counter()
        for at in self.replied.pop(config["configurable"]["thread_id"], ()):
            self.samples.append(now - at)

    async def aput(self, config, checkpoint, metadata, new_versions):
        out = await super().aput(config, checkpoint, metadata, new_versions)
        self.checkpoints += 1
        self._durable(config)
        return out

    async def aput_writes(self, config, writes, task_id, task_path=""):
        out = await super().aput_writes(config, writes, task_id, task_path)
        self._durable(config)
        return out


def build(saver: Stamped, rounds: int, base_s: float):
    call_text, answer, result = text("assistant"), text("answer"), text("tool result")

    async def model(state: State, config):
        tid = config["configurable"]["thread_id"]
        turn = state["turn"]
        if base_s > 0:
            await asyncio.sleep(latency_s(base_s, int(tid.split("-")[1]), turn))
        saver.replied.setdefault(tid, []).append(time.perf_counter())
        if turn < rounds:
            call = {"name": "lookup", "args": {"q": "x"}, "id": f"c{turn}"}
            reply = AIMessage(content=call_text, tool_calls=[call])
        else:
            reply = AIMessage(content=answer)
        return {"messages": [reply], "turn": turn + 1}

    async def tools(state: State):
        call = state["messages"][-1].tool_calls[0]
        return {"messages": [ToolMessage(content=result, tool_call_id=call["id"])]}

    def route(state: State):
        return "tools" if state["messages"][-1].tool_calls else END

    g = StateGraph(State)
    g.add_node("model", model)
    g.add_node("tools", tools)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, ["tools", END])
    g.add_edge("tools", "model")
    return g.compile(checkpointer=saver)


async def workload(db: str, runs: int, rounds: int, base_s: float, durability: str | None):
    async with Stamped.from_conn_string(db) as saver:
        await saver.setup()
        async with saver.conn.execute("PRAGMA synchronous") as c:
            synchronous = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[(await c.fetchone())[0]]
        async with saver.conn.execute("PRAGMA journal_mode") as c:
            journal = (await c.fetchone())[0]
        graph = build(saver, rounds, base_s)
        extra = {"durability": durability} if durability else {}

        async def one(i: int):
            tid = f"w5-{i:07d}"
            start = {
                "messages": [SystemMessage(text("system")), HumanMessage(text(tid))],
                "turn": 0,
            }
            cfg = {"configurable": {"thread_id": tid}, "recursion_limit": 4 * rounds + 20}
            await graph.ainvoke(start, cfg, **extra)

        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        base_rss = rss_bytes("VmRSS")
        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(runs)))
        wall = time.perf_counter() - started
        peak_rss = max(rss_bytes("VmHWM"), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        figures = (saver.checkpoints, saver.commits, sorted(saver.samples))
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    size = os.path.getsize(db)
    checkpoints, commits, samples = figures
    ideal = max(
        (sum(latency_s(base_s, r, t) for t in range(rounds + 1)) for r in range(runs)),
        default=0.0,
    )
    q = lambda p: samples[round((len(samples) - 1) * p)] * 1000 if samples else 0.0  # noqa: E731
    return {
        "runs": runs,
        "rounds": rounds,
        "synchronous": synchronous,
        "journal_mode": journal,
        "durability": durability or "library default",
        "wall_ms": wall * 1000,
        "ideal_ms": ideal * 1000,
        "wall_over_ideal": wall / ideal if ideal else None,
        "transitions": checkpoints,
        "per_s": checkpoints / wall,
        "commits": commits,
        "commits_per_s": commits / wall,
        "transitions_per_fsync": checkpoints / max(commits, 1),
        "replies": len(samples),
        "reply_p50_ms": q(0.5),
        "reply_p99_ms": q(0.99),
        "base_rss": base_rss,
        "peak_rss": peak_rss,
        "rss_per_run": (peak_rss - base_rss) / runs,
        "bytes": size,
        "bytes_per_transition": size / max(checkpoints, 1),
    }


def child(args) -> None:
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, f"{args.child}.db")
        if args.child == "w1":
            out = asyncio.run(workload(db, 1, args.rounds, 0.0, args.durability))
        else:
            out = asyncio.run(workload(db, args.runs, args.w5_rounds, args.model_ms / 1000, args.durability))
    print(json.dumps(out))


def median_of(args, which: str) -> dict:
    cmd = [sys.executable, __file__, "--child", which, "--rounds", str(args.rounds),
           "--runs", str(args.runs), "--w5-rounds", str(args.w5_rounds),
           "--model-ms", str(args.model_ms)]
    if args.durability:
        cmd += ["--durability", args.durability]
    reps = []
    for _ in range(args.reps):
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        reps.append(json.loads(out.stdout))
    reps.sort(key=lambda r: r["wall_ms"])
    med = reps[len(reps) // 2]
    med["walls_ms"] = [round(r["wall_ms"], 1) for r in reps]
    return med


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=["w1", "w5"], action="append")
    p.add_argument("--rounds", type=int, default=500, help="W1 rounds (default 500)")
    p.add_argument("--runs", type=int, default=10_000, help="W5 runs (default 10,000)")
    p.add_argument("--w5-rounds", type=int, default=3, help="W5 rounds per run (default 3)")
    p.add_argument("--model-ms", type=int, default=1000, help="W5 model latency (default 1000)")
    p.add_argument("--reps", type=int, default=3, help="repetitions; medians reported")
    p.add_argument("--durability", choices=["sync", "async", "exit"],
                   help="LangGraph's durability mode (default: the library's)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", choices=["w1", "w5"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    report = {}
    for which in args.only or ["w1", "w5"]:
        print(f"  measuring {which} on LangGraph …", file=sys.stderr)
        report[which] = median_of(args, which)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"LangGraph {version('langgraph')}, langgraph-checkpoint-sqlite "
          f"{version('langgraph-checkpoint-sqlite')}: medians of {args.reps}")
    if "w1" in report:
        w = report["w1"]
        print(f"W1  one run, {w['rounds']} rounds ({w['journal_mode']}, synchronous={w['synchronous']}, "
              f"durability {w['durability']}): {w['transitions']} checkpoints in {w['wall_ms']:.1f} ms "
              f"= {w['per_s']:.0f}/s; {w['commits']} commits; {w['bytes_per_transition']:.0f} B/checkpoint "
              f"({w['bytes'] / 1e6:.2f} MB); walls {w['walls_ms']}")
    if "w5" in report:
        w = report["w5"]
        print(f"W5  {w['runs']} runs × {w['rounds']} rounds together, model {args.model_ms} ms ± 20% "
              f"({w['journal_mode']}, synchronous={w['synchronous']}, durability {w['durability']})")
        print(f"    wall {w['wall_ms']:.0f} ms = {w['wall_over_ideal']:.3f}× ideal ({w['ideal_ms']:.0f} ms); "
              f"{w['transitions']} checkpoints = {w['per_s']:.0f}/s; walls {w['walls_ms']}")
        print(f"    {w['commits']} commits = {w['commits_per_s']:.0f}/s, {w['transitions_per_fsync']:.2f} "
              f"checkpoints per fsync; reply → durable p50 {w['reply_p50_ms']:.1f} ms, "
              f"p99 {w['reply_p99_ms']:.1f} ms ({w['replies']} replies)")
        print(f"    peak RSS {w['peak_rss'] / 1048576:.1f} MiB ({w['base_rss'] / 1048576:.1f} MiB before) = "
              f"{w['rss_per_run'] / 1024:.1f} KiB per run in flight; {w['bytes_per_transition']:.0f} B/checkpoint")


def version(dist: str) -> str:
    from importlib.metadata import version as v
    return v(dist)


if __name__ == "__main__":
    main()
