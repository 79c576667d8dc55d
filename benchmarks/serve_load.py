"""Load test of `aiayn serve` on loopback: throughput and latency at 1, 8, 32 and 128 clients.

Each client sends one real sentence per request (Multi30k validation sources, German) to
`POST /v1/translate` and waits for the answer before sending the next, until the bounded list
of sentences is used up. The same sentences go, in one run, to:

    batched      `aiayn serve MODEL` as shipped (continuous batching of beam search: up to
                 --max-batch texts in flight; the texts/batch column is then texts in flight per step)
    unbatched    the same server with `--max-batch 1`: one request decoded at a time, the
                 "Flask app" that fairseq and OpenNMT users are told to write
    ctranslate2  `aiayn serve --backend ctranslate2` on the model exported by
                 `aiayn export ctranslate2` (with --ctranslate2; float32 unless --quantization)
    in-process   `Translator.translate` on the whole list in one call (its own batching), in
                 this process: the ceiling a server can approach; and, to locate the gap, the
                 same in calls of --max-batch sentences, and the continuous search at each
                 concurrency of the server rows (min(clients, --max-batch) sentences in flight, a
                 new one joining as one ends, as the server's queue feeds it), with p50/p99 of a
                 sentence's time from joining to its answer

Every server is a separate process (`python -m aiayn serve`) on a free loopback port. The
clients are asyncio tasks over one httpx connection pool in this process, on the same cores;
with `--client wrk` the throughput rows come from `wrk` (Debian's package: one C thread and
event loop, a Lua script cycling the same sentences, for --wrk-seconds a row), which takes much
less of the two cores than Python clients do, so the rows measure the servers more than the
load generator.

Two more checks, bounded in time:
    overflow     128 clients against a server whose queue holds 8: every answer must be a 200 or
                 a 503 (with Retry-After), never a timeout, a reset or a 5xx of another kind;
                 --overflow-runs repeats it on fresh servers (a rare failure needs many runs to
                 show), and --overflow-only runs nothing else
    soak         --soak-seconds of 32 clients cycling the sentences, after one warm-up pass over
                 them; the server's resident memory (VmRSS) is read at the start and at the end

    python benchmarks/serve_load.py [--model runs/multi30k-de-en/model] [--requests 256]
                                    [--ctranslate2] [--soak-seconds 120] [--client wrk] [--json]
    python benchmarks/serve_load.py --overflow-only --overflow-runs 25 [--keep-alive 5]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiayn.serve.batcher import BatchConfig

from _common import SHARED_DATA, add_common_arguments, emit_json, format_table, peer_installed, set_threads

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = (1, 8, 32, 128)
VALID = SHARED_DATA / "multi30k" / "val.de.gz"


# -- servers ------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(model: Path, *options: str, log: Path):
    """`python -m aiayn serve MODEL OPTIONS` on a free port until the block ends; yields (url, pid)."""
    import httpx

    port = free_port()
    command = [sys.executable, "-m", "aiayn", "serve", str(model), "--port", str(port), "--device", "cpu", *options]
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer /health in 180 s: {log}")
            time.sleep(0.2)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- clients ------------------------------------------------------------------------------------
async def _client(http, url: str, todo: collections.deque, latencies: list, outcomes: collections.Counter,
                  deadline: float | None, failures: list, t0: float) -> None:
    import httpx

    while todo and (deadline is None or time.monotonic() < deadline):
        sentence = todo.popleft()
        if deadline is not None:
            todo.append(sentence)  # the soak cycles the sentences
        start = time.perf_counter()
        try:
            response = await http.post(f"{url}/v1/translate", json={"text": [sentence]})
            outcome = response.status_code
            if outcome == 503 and "retry-after" not in response.headers:
                outcome = "503 without Retry-After"
        except httpx.TimeoutException:
            outcome = "timeout"
        except httpx.HTTPError as e:
            outcome = type(e).__name__
        if not isinstance(outcome, int):  # not an HTTP status: when it was sent, and when it failed
            failures.append((outcome, start - t0, time.perf_counter() - t0))
        outcomes[outcome] += 1
        if outcome == 200:
            latencies.append(time.perf_counter() - start)


async def _load(url: str, sentences: list[str], clients: int, seconds: float | None, timeout: float) -> dict:
    import httpx

    todo = collections.deque(sentences)
    latencies: list[float] = []
    outcomes: collections.Counter = collections.Counter()
    failures: list[tuple[str, float, float]] = []
    pool = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=pool, timeout=timeout) as http:
        start = time.perf_counter()
        deadline = None if seconds is None else time.monotonic() + seconds
        await asyncio.gather(*(_client(http, url, todo, latencies, outcomes, deadline, failures, start)
                               for _ in range(clients)))
        wall = time.perf_counter() - start
    return {**summarize(latencies, outcomes, wall, clients), "failures": failures}


def load(url: str, sentences: list[str], clients: int, seconds: float | None = None, timeout: float = 120.0) -> dict:
    """`clients` concurrent clients until the sentences (or `seconds`) run out."""
    return asyncio.run(_load(url, sentences, clients, seconds, timeout))


def summarize(latencies: list[float], outcomes: collections.Counter, wall: float, clients: int) -> dict:
    cuts = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else [float("nan")] * 99
    errors = {str(k): v for k, v in outcomes.items() if k != 200}
    return row(clients, outcomes[200], errors, wall, [cuts[49], cuts[94], cuts[98]])


def row(clients: int, ok: int, error_kinds: dict, seconds: float, p50_95_99: list[float]) -> dict:
    """One measurement: answers, errors by kind, sentences/s and latency percentiles (given in s)."""
    p50, p95, p99 = (1000 * p for p in p50_95_99)
    return {"clients": clients, "ok": ok, "errors": sum(error_kinds.values()), "error_kinds": error_kinds,
            "sent_per_s": ok / seconds, "p50_ms": p50, "p95_ms": p95, "p99_ms": p99, "seconds": seconds}


# The wrk client: one POST /v1/translate per request, cycling the sentences (one JSON body per line of
# the file given after `--`); at the end, one line with the counts and latency percentiles (µs).
WRK_SCRIPT = """
local bodies, i = {}, 0
function init(args)
  for line in io.lines(args[1]) do bodies[#bodies + 1] = line end
end
function request()
  i = i % #bodies + 1
  return wrk.format("POST", "/v1/translate", {["Content-Type"] = "application/json"}, bodies[i])
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("AIAYN %d %d %d %d %d %d %d\\n", summary.requests, e.status,
    e.connect + e.read + e.write + e.timeout, summary.duration, latency:percentile(50),
    latency:percentile(95), latency:percentile(99)))
end
"""


def load_wrk(url: str, sentences: list[str], clients: int, seconds: int, timeout: int = 120) -> dict:
    """`clients` connections from `wrk` for `seconds` (whole seconds: wrk reads no fractions), cycling
    `sentences`. wrk's percentiles include any non-2xx answers (the httpx rows' only 200s)."""
    with tempfile.TemporaryDirectory() as tmp:
        script, bodies = Path(tmp) / "load.lua", Path(tmp) / "bodies.jsonl"
        script.write_text(WRK_SCRIPT)
        bodies.write_text("".join(json.dumps({"text": [s]}) + "\n" for s in sentences))
        out = subprocess.run(["wrk", "-t1", f"-c{clients}", f"-d{seconds}s", f"--timeout={timeout}s",
                              "-s", str(script), url, "--", str(bodies)], capture_output=True, text=True)
    found = re.search(r"AIAYN (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)", out.stdout)
    if out.returncode != 0 or found is None:
        raise RuntimeError(f"wrk exited with {out.returncode} without its summary: {out.stdout[-2000:]} {out.stderr[-2000:]}")
    requests, status_errors, socket_errors, duration_us, p50, p95, p99 = map(int, found.groups())
    return row(clients, requests - status_errors, {"non-2xx": status_errors, "socket": socket_errors},
               duration_us / 1e6, [p50 / 1e6, p95 / 1e6, p99 / 1e6])


def settle(url: str, quiet_s: float = 0.5, limit_s: float = 120.0) -> None:
    """Wait until the server has answered what is still in flight (wrk stops with requests
    outstanding), so that they do not count in the next row's /metrics."""
    deadline, last = time.monotonic() + limit_s, None
    while time.monotonic() < deadline:
        counts = server_counts(url)
        now = (counts["requests"], counts["queue_length"])
        if now == last and counts["queue_length"] == 0:
            return
        last = now
        time.sleep(quiet_s)


def in_process(model: Path, sentences: list[str], flight: int, clients: tuple[int, ...] = ()) -> list[dict]:
    """Without HTTP, in this process: `Translator.translate` on the whole list in one call (its own
    sorted batches), in calls of `flight` sentences, and the continuous search with
    min(n, `flight`) sentences in flight for each n of `clients` (a new one joins as soon as one
    ends), as the server runs it."""
    from aiayn.tasks import load_pipeline

    translator = load_pipeline(model).translator  # set up by task.json, as the servers are
    translator.translate(sentences[:8])  # warm-up
    runs = {("in-process", "-"): lambda: translator.translate(sentences) and None,
            (f"in-process, calls of {flight}", "-"): lambda: [translator.translate(sentences[i:i + flight])
                                                              for i in range(0, len(sentences), flight)] and None}
    if translator.continuous() is None:  # greedy, sampling or beam 1: the server decodes whole batches too
        print(f"{model}: no continuous search with its task.json's settings: no continuous rows", file=sys.stderr)
    else:
        for n in clients or (flight,):
            runs[("in-process continuous", n)] = lambda n=n: continuously(translator, sentences, min(n, flight))
    rows = []
    for (name, n), run in runs.items():
        start, cpu_start = time.perf_counter(), time.process_time()
        latencies = run()  # the continuous runs' per-sentence seconds; None for whole calls
        wall = time.perf_counter() - start
        cores = {"decoder_cores": (time.process_time() - cpu_start) / wall}  # this process: only the decoding
        if latencies:
            rows.append({**row(n, len(sentences), {}, wall, percentiles(latencies)), "server": name, **cores})
        else:
            rows.append({"server": name, "clients": n, "ok": len(sentences), "errors": 0,
                         "sent_per_s": len(sentences) / wall, "seconds": wall, **cores})
    return rows


def percentiles(latencies: list[float]) -> list[float]:
    ordered = sorted(latencies)
    return [ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.50, 0.95, 0.99)]


def continuously(translator, sentences: list[str], flight: int) -> list[float]:
    """The continuous search with `flight` sentences in flight; -> each sentence's seconds from joining to its answer."""
    session, todo, joined, latencies = translator.continuous(), collections.deque(enumerate(sentences)), {}, []
    while todo and len(session) < flight:
        i, text = todo.popleft()
        joined[i] = time.perf_counter()
        session.add(i, [text])
    while len(session):
        for i, _ in session.step():
            latencies.append(time.perf_counter() - joined.pop(i))
            if todo:
                i, text = todo.popleft()
                joined[i] = time.perf_counter()
                session.add(i, [text])
    return latencies


# -- the run ------------------------------------------------------------------------------------
def read_sentences(n: int) -> list[str]:
    from aiayn.data.corpus import read_lines

    lines = [line for line in read_lines(VALID) if line]
    if len(lines) < n:
        raise SystemExit(f"{VALID}: {len(lines)} sentences, fewer than --requests {n}")
    return lines[:n]


def cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU seconds so far of process `pid` (the server's HTTP process, and its decoding thread with
    --worker thread) and of all its live descendants (the fork server and its decoder processes), from
    /proc; a process that exits meanwhile counts as 0."""
    def used(p: str) -> float:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
        return 0.0

    def descendants(p: str) -> list[str]:
        kids = []
        with contextlib.suppress(OSError):
            kids = [c for task in Path(f"/proc/{p}/task").iterdir() for c in (task / "children").read_text().split()]
        return kids + [d for k in kids for d in descendants(k)]

    return used(str(pid)), sum(used(p) for p in descendants(str(pid)))


def sweep(name: str, url: str, pid: int, sentences: list[str], clients: tuple[int, ...],
          wrk_seconds: int = 0) -> list[dict]:
    """One row per concurrency level; with `wrk_seconds`, wrk's load for that long instead of httpx's. Each
    row has the cores the server's HTTP process and its decoder processes kept busy (CPU seconds / wall)."""
    load(url, sentences[:16], 4)  # warm-up: threads, allocator, first shapes
    rows = []
    for n in clients:
        before, cpu_before, start = server_counts(url), cpu_seconds(pid), time.perf_counter()
        measured = load_wrk(url, sentences, n, wrk_seconds) if wrk_seconds else load(url, sentences, n)
        wall, cpu = time.perf_counter() - start, cpu_seconds(pid)
        measured = {"server": name, **measured, "mean_batch": mean_batch(before, server_counts(url)),
                    "http_cores": (cpu[0] - cpu_before[0]) / wall, "decoder_cores": (cpu[1] - cpu_before[1]) / wall}
        if wrk_seconds:
            settle(url)
        print(f"  {name:12s} {n:4d} clients: {measured['sent_per_s']:7.1f} sentences/s, p50 {measured['p50_ms']:.0f} ms, "
              f"errors {measured['errors']}", file=sys.stderr, flush=True)
        rows.append(measured)
    return rows


def server_counts(url: str) -> dict:
    """The server's /metrics counters so far."""
    import httpx

    return httpx.get(f"{url}/v1/metrics", timeout=10).json()


def mean_batch(before: dict, after: dict) -> float:
    """Texts decoded together between two /metrics readings: texts in flight per step under
    continuous batching, texts per call under whole-call batching."""
    diff = lambda key: after.get(key, 0) - before.get(key, 0)  # noqa: E731
    if diff("continuous_steps"):
        return diff("continuous_texts_in_flight") / diff("continuous_steps")
    return diff("texts") / max(diff("batches"), 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, default=ROOT / "runs" / "multi30k-de-en" / "model",
                   help="a translation model directory (default: the Multi30k recipe's)")
    p.add_argument("--requests", type=int, default=256, help="sentences per measurement (default: 256)")
    p.add_argument("--clients", default=",".join(map(str, CLIENTS)), help="concurrency levels (default: 1,8,32,128)")
    p.add_argument("--ctranslate2", action="store_true", help="add the ctranslate2 backend (needs aiayn[ct2])")
    p.add_argument("--quantization", default="float32", help="of the ctranslate2 export (default: float32)")
    p.add_argument("--max-batch", type=int, default=BatchConfig().max_batch,
                   help=f"the batched servers' --max-batch (default: aiayn serve's, {BatchConfig().max_batch})")
    p.add_argument("--max-wait-ms", type=float, default=BatchConfig().max_wait_ms,
                   help=f"the batched servers' --max-wait-ms (default: aiayn serve's, {BatchConfig().max_wait_ms:g})")
    p.add_argument("--soak-seconds", type=float, default=120.0, help="memory soak at 32 clients; 0 = skip")
    p.add_argument("--client", choices=("httpx", "wrk"), default="httpx",
                   help="the load generator of the throughput rows (wrk: Debian's package)")
    p.add_argument("--wrk-seconds", type=int, default=20, help="with --client wrk: whole seconds per row")
    p.add_argument("--overflow-runs", type=int, default=1, help="overflow checks, each on a fresh server (default: 1)")
    p.add_argument("--overflow-only", action="store_true", help="only the overflow checks")
    p.add_argument("--keep-alive", type=float, help="every server's --keep-alive (default: aiayn serve's)")
    p.add_argument("--worker", choices=("process", "thread"), default=BatchConfig().worker,
                   help=f"every server's --worker: the decoder in a process of its own or a thread of the HTTP "
                        f"process (default: aiayn serve's, {BatchConfig().worker})")
    add_common_arguments(p)
    args = p.parse_args()
    if not (args.model / "config.json").is_file():
        raise SystemExit(f"{args.model}: no model directory (train one: aiayn train recipes/multi30k-de-en.toml)")
    clients = tuple(int(c) for c in args.clients.split(","))
    if args.client == "wrk" and not args.overflow_only and shutil.which("wrk") is None:
        raise SystemExit("--client wrk needs wrk on the PATH (apt-get install wrk)")
    if args.ctranslate2 and not peer_installed("ctranslate2", "--ctranslate2"):
        raise SystemExit("--ctranslate2 needs ctranslate2 (pip install -e '.[ct2]'); nothing was measured")
    if args.wrk_seconds < 1 or args.overflow_runs < 1:
        raise SystemExit("--wrk-seconds and --overflow-runs must be at least 1")
    wrk_seconds = args.wrk_seconds if args.client == "wrk" else 0
    sentences = read_sentences(args.requests)
    set_threads(args.threads)  # this process's, for the in-process row; the servers use torch's default
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        keep_alive = () if args.keep_alive is None else ("--keep-alive", str(args.keep_alive))
        keep_alive = (*keep_alive, "--worker", args.worker)
        batching = ("--max-batch", str(args.max_batch), "--max-wait-ms", str(args.max_wait_ms), *keep_alive)
        if not args.overflow_only:
            with server(args.model, *batching, log=logs / "batched.log") as (url, pid):
                rows += sweep("batched", url, pid, sentences, clients, wrk_seconds)
            with server(args.model, "--max-batch", "1", *keep_alive, log=logs / "unbatched.log") as (url, pid):
                rows += sweep("unbatched", url, pid, sentences, clients, wrk_seconds)
            if args.ctranslate2:
                from aiayn.export import export_ctranslate2

                exported = export_ctranslate2(args.model, logs / "ct2", quantization=args.quantization)
                with server(exported, "--backend", "ctranslate2", *batching, log=logs / "ct2.log") as (url, pid):
                    rows += sweep("ctranslate2", url, pid, sentences, clients, wrk_seconds)
            rows += in_process(args.model, sentences, flight=args.max_batch, clients=clients)
        overflow = overflow_checks(args.model, batching, sentences, args.overflow_runs, logs)
        soak = None
        if args.soak_seconds > 0 and not args.overflow_only:
            with server(args.model, *batching, log=logs / "soak.log") as (url, pid):
                load(url, sentences, 32)  # one full pass first: every batch shape and allocator pool warmed up
                before = rss_mib(pid)
                soak = {**load(url, sentences, 32, seconds=args.soak_seconds), "rss_start_mib": before,
                        "rss_end_mib": rss_mib(pid)}
    report(rows, overflow, soak, args)


def overflow_checks(model: Path, batching: tuple, sentences: list[str], runs: int, logs: Path) -> dict:
    """128 clients against a queue of 8, `runs` times on fresh servers: the answers and error kinds
    summed over the runs, the runs that had an error other than a 503, and each failed request's
    (error, seconds into its run when sent, when it failed)."""
    ok, kinds, bad_runs, failures = 0, collections.Counter(), 0, []
    for i in range(runs):
        with server(model, *batching, "--max-queue", "8", log=logs / f"overflow{i}.log") as (url, _):
            one = load(url, sentences, 128)
        ok += one["ok"]
        kinds.update(one["error_kinds"])
        bad_runs += any(kind != "503" for kind in one["error_kinds"])
        failures += one["failures"]
        if runs > 1:
            print(f"  overflow run {i + 1}/{runs}: {one['ok']} answered, {one['error_kinds']}", file=sys.stderr, flush=True)
    return {"runs": runs, "ok": ok, "error_kinds": dict(kinds), "runs_with_other_errors": bad_runs, "failures": failures}


def rate(rows: list[dict], server_name: str, clients) -> float:
    return next((r["sent_per_s"] for r in rows if r["server"] == server_name and r["clients"] == clients), float("nan"))


def report(rows: list[dict], overflow: dict, soak: dict | None, args) -> None:
    ratios = {}
    per_row = f"wrk for {args.wrk_seconds} s, cycling them" if args.client == "wrk" else "httpx clients, each once"
    print(f"model {args.model}, {args.requests} Multi30k validation sentences, one per request"
          + ("" if args.overflow_only else f"; server rows: {per_row}"))
    if rows:
        print(format_table(rows, [("server", "server", ""), ("clients", "clients", ""), ("sent_per_s", "sentences/s", ",.1f"),
                                  ("p50_ms", "p50 ms", ",.0f"), ("p95_ms", "p95 ms", ",.0f"), ("p99_ms", "p99 ms", ",.0f"),
                                  ("mean_batch", "texts/batch", ".1f"), ("http_cores", "HTTP cores", ".2f"),
                                  ("decoder_cores", "decoder cores", ".2f"), ("errors", "errors", "")]))
        ratios = ratios_of(rows, args)
        print()
        for name, value in ratios.items():
            print(f"{name.replace('_', ' ')}: {value:.2f}x")
    keep_alive = "" if args.keep_alive is None else f", --keep-alive {args.keep_alive:g}"
    print(f"\noverflow (128 clients, queue of 8{keep_alive}), {overflow['runs']} run(s): {overflow['ok']} answered, "
          f"error kinds {overflow['error_kinds']} (only 503 is acceptable); runs with another error: "
          f"{overflow['runs_with_other_errors']}"
          + "".join(f"\n  {kind}: sent {sent:.2f} s into its run, failed at {failed:.2f} s"
                    for kind, sent, failed in overflow["failures"]))
    if soak:
        print(f"soak ({args.soak_seconds:.0f} s, 32 clients): {soak['ok']} answered, {soak['errors']} errors, "
              f"RSS {soak['rss_start_mib']:.0f} MiB at the start, {soak['rss_end_mib']:.0f} MiB at the end")
    if args.json:
        emit_json({"rows": rows, "ratios": ratios, "overflow": overflow, "soak": soak, "keep_alive": args.keep_alive})


def ratios_of(rows: list[dict], args) -> dict:
    inproc = rate(rows, "in-process", "-")
    ratios = {"batched_vs_unbatched_at_32": rate(rows, "batched", 32) / rate(rows, "unbatched", 32),
              "batched_vs_in_process_at_32": rate(rows, "batched", 32) / inproc,
              "batched_vs_in_process_continuous_at_32": rate(rows, "batched", 32) / rate(rows, "in-process continuous", 32),
              "in_process_continuous_vs_in_process": rate(rows, "in-process continuous", args.max_batch) / inproc}
    if args.ctranslate2:
        ratios["ctranslate2_vs_batched_at_32"] = rate(rows, "ctranslate2", 32) / rate(rows, "batched", 32)
    return ratios


if __name__ == "__main__":
    main()
