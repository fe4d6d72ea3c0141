#!/usr/bin/env python3
"""runtape's W1 and W5 workloads on LangGraph, in its lightest idiomatic setup or a heavier one.

Not part of CI: `examples/compare/run.sh` makes a venv with the pinned requirements
(`examples/compare/requirements.txt`) and runs this.

Two setups (`--setup`):

- `light` (the default): state is a plain `TypedDict` whose messages are plain dicts appended by
  `operator.add`; W1 runs the graph synchronously with the sync `SqliteSaver`; W5 (many runs at
  once) needs asyncio, so it uses `AsyncSqliteSaver` with the same plain state.
- `heavy`: `MessagesState` (LangChain message objects, the `add_messages` reducer) with
  `AsyncSqliteSaver` for both, as LangGraph's tutorials write it.

`--durability` picks LangGraph's durability mode (`sync`, `async`, `exit`) for either setup. The workloads mirror `runtape bench` (src/bench/workload.rs, src/bench/w5.rs):

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
import operator
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
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


class PlainState(TypedDict):
    """The light setup's state: plain dicts, appended without LangChain's message reducer."""

    messages: Annotated[list, operator.add]
    turn: int


class Counting:
    """Counts a saver's commits and notes when each reply is first durable."""

    def _start_counting(self) -> None:
        self.commits = 0
        self.checkpoints = 0
        self.replied: dict[str, list[float]] = {}
        self.samples: list[float] = []

    def _durable(self, config) -> None:
        self.commits += 1
        now = time.perf_counter()
        for at in self.replied.pop(config["configurable"]["thread_id"], ()):
            self.samples.append(now - at)


class StampedSync(Counting, SqliteSaver):
    """The sync saver, counted."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._start_counting()

    def put(self, config, checkpoint, metadata, new_versions):
        out = super().put(config, checkpoint, metadata, new_versions)
        self.checkpoints += 1
        self._durable(config)
        return out

    def put_writes(self, config, writes, task_id, task_path=""):
        out = super().put_writes(config, writes, task_id, task_path)
        self._durable(config)
        return out


class Stamped(Counting, AsyncSqliteSaver):
    """The async saver, counted."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._start_counting()

    async def aput(self, config, checkpoint, metadata, new_versions):
        out = await super().aput(config, checkpoint, metadata, new_versions)
        self.checkpoints += 1
        self._durable(config)
        return out

    async def aput_writes(self, config, writes, task_id, task_path=""):
        out = await super().aput_writes(config, writes, task_id, task_path)
        self._durable(config)
        return out


def build(saver, rounds: int, base_s: float, light: bool, sync: bool):
    """The graph model -> tools -> model ... -> END, with plain-dict or LangChain messages, and
    sync or async nodes."""
    call_text, answer, result = text("assistant"), text("answer"), text("tool result")

    def reply_for(turn: int):
        if turn < rounds:
            call = {"name": "lookup", "args": {"q": "x"}, "id": f"c{turn}"}
            if light:
                return {"role": "assistant", "content": call_text, "tool_calls": [call]}
            return AIMessage(content=call_text, tool_calls=[call])
        return {"role": "assistant", "content": answer} if light else AIMessage(content=answer)

    def calls_of(message):
        return message.get("tool_calls") if light else message.tool_calls

    def tool_message(call_id: str):
        if light:
            return {"role": "tool", "content": result, "tool_call_id": call_id}
        return ToolMessage(content=result, tool_call_id=call_id)

    def model_sync(state, config):
        tid = config["configurable"]["thread_id"]
        saver.replied.setdefault(tid, []).append(time.perf_counter())
        return {"messages": [reply_for(state["turn"])], "turn": state["turn"] + 1}

    async def model_async(state, config):
        tid = config["configurable"]["thread_id"]
        turn = state["turn"]
        if base_s > 0:
            await asyncio.sleep(latency_s(base_s, int(tid.split("-")[1]), turn))
        saver.replied.setdefault(tid, []).append(time.perf_counter())
        return {"messages": [reply_for(turn)], "turn": turn + 1}

    def tools_sync(state):
        call = calls_of(state["messages"][-1])[0]
        return {"messages": [tool_message(call["id"])]}

    async def tools_async(state):
        return tools_sync(state)

    def route(state):
        return "tools" if calls_of(state["messages"][-1]) else END

    g = StateGraph(PlainState if light else State)
    g.add_node("model", model_sync if sync else model_async)
    g.add_node("tools", tools_sync if sync else tools_async)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, ["tools", END])
    g.add_edge("tools", "model")
    return g.compile(checkpointer=saver)


def first_messages(tid: str, light: bool) -> list:
    if light:
        return [{"role": "system", "content": text("system")}, {"role": "user", "content": text(tid)}]
    return [SystemMessage(text("system")), HumanMessage(text(tid))]


def pragmas(conn) -> tuple[str, str]:
    synchronous = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[conn.execute("PRAGMA synchronous").fetchone()[0]]
    return synchronous, conn.execute("PRAGMA journal_mode").fetchone()[0]


def sync_workload(db: str, rounds: int, durability: str | None):
    """W1 in the light setup: one run, the graph invoked synchronously on the sync saver."""
    with StampedSync.from_conn_string(db) as saver:
        saver.setup()
        synchronous, journal = pragmas(saver.conn)
        graph = build(saver, rounds, 0.0, light=True, sync=True)
        extra = {"durability": durability} if durability else {}
        tid = "w1-0000000"
        start = {"messages": first_messages(tid, True), "turn": 0}
        cfg = {"configurable": {"thread_id": tid}, "recursion_limit": 4 * rounds + 20}
        base_rss = rss_bytes("VmRSS")
        started = time.perf_counter()
        graph.invoke(start, cfg, **extra)
        wall = time.perf_counter() - started
        peak_rss = max(rss_bytes("VmHWM"), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        figures = (saver.checkpoints, saver.commits, sorted(saver.samples))
    return summarise(db, 1, rounds, 0.0, durability, synchronous, journal, wall, base_rss, peak_rss, figures)


async def workload(db: str, runs: int, rounds: int, base_s: float, durability: str | None, light: bool):
    async with Stamped.from_conn_string(db) as saver:
        await saver.setup()
        async with saver.conn.execute("PRAGMA synchronous") as c:
            synchronous = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[(await c.fetchone())[0]]
        async with saver.conn.execute("PRAGMA journal_mode") as c:
            journal = (await c.fetchone())[0]
        graph = build(saver, rounds, base_s, light=light, sync=False)
        extra = {"durability": durability} if durability else {}

        async def one(i: int):
            tid = f"w5-{i:07d}"
            start = {"messages": first_messages(tid, light), "turn": 0}
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
    return summarise(db, runs, rounds, base_s, durability, synchronous, journal, wall, base_rss, peak_rss, figures)


def summarise(db, runs, rounds, base_s, durability, synchronous, journal, wall, base_rss, peak_rss, figures):
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
        light = args.setup == "light"
        if args.child == "w1" and light:
            out = sync_workload(db, args.rounds, args.durability)
        elif args.child == "w1":
            out = asyncio.run(workload(db, 1, args.rounds, 0.0, args.durability, light))
        else:
            out = asyncio.run(workload(db, args.runs, args.w5_rounds, args.model_ms / 1000, args.durability, light))
        out["setup"] = args.setup
    print(json.dumps(out))


def median_of(args, which: str) -> dict:
    cmd = [sys.executable, __file__, "--child", which, "--rounds", str(args.rounds),
           "--runs", str(args.runs), "--w5-rounds", str(args.w5_rounds),
           "--model-ms", str(args.model_ms), "--setup", args.setup]
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
    p.add_argument("--setup", choices=["light", "heavy"], default="light",
                   help="light: plain-dict state, sync SqliteSaver for W1 (default); "
                        "heavy: MessagesState with AsyncSqliteSaver")
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
    saver = {"light": "plain-dict state; SqliteSaver for W1, AsyncSqliteSaver for W5",
             "heavy": "MessagesState; AsyncSqliteSaver"}[args.setup]
    print(f"LangGraph {version('langgraph')}, langgraph-checkpoint-sqlite "
          f"{version('langgraph-checkpoint-sqlite')}, {args.setup} setup ({saver}): medians of {args.reps}")
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
