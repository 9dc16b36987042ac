"""Row 3's second baseline: AWS Lambda Powertools for Python's `idempotent_function` with its
Redis persistence layer, on a no-op function, at a given concurrency of processes.

Every call has a new key (like idem's benchmark), so each is a first execution: Powertools
saves an INPROGRESS record, runs the function, saves the result.

    python noop.py <redis-url> <processes> <start_ms|now> <seconds>

Prints one JSON line: calls completed by all processes, per second.
"""

import json
import multiprocessing as mp
import os
import sys
import time
import warnings

from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.persistence.redis import (
    RedisCachePersistenceLayer,
)

# The same arguments as every other row (bench/src/lib.rs, ARGUMENTS).
ARGUMENTS = json.loads(
    '{"ticket":48213,"status":"in_progress","assignee":"dana.okafor@example.com",'
    '"note":"Export button does nothing on Safari 17; reproduced on staging.",'
    '"tags":["bug","export","safari"],"priority":2}'
)


def worker(url, start_ms, seconds, index, results):
    # Outside Lambda there is no remaining time to read; Powertools warns on every call.
    warnings.filterwarnings("ignore", message="Couldn't determine the remaining time")
    layer = RedisCachePersistenceLayer(url=url)
    config = IdempotencyConfig(event_key_jmespath="call_id")

    @idempotent_function(data_keyword_argument="call", persistence_store=layer, config=config)
    def noop(call):
        return "ok"

    delay = start_ms / 1000.0 - time.time()
    if delay > 0:
        time.sleep(delay)
    begin = time.perf_counter()
    end = begin + seconds
    calls = 0
    pid = os.getpid()
    while time.perf_counter() < end:
        noop(call={"call_id": f"pt-{pid}-{index}-{calls}", "arguments": ARGUMENTS})
        calls += 1
    results.put((calls, time.perf_counter() - begin))


def main():
    url, processes, start, seconds = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    start_ms = time.time() * 1000 + 2000 + 100 * processes if start == "now" else float(start)
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    children = [
        ctx.Process(target=worker, args=(url, start_ms, seconds, i, results))
        for i in range(processes)
    ]
    for child in children:
        child.start()
    done = [results.get() for _ in children]
    for child in children:
        child.join()
    calls = sum(c for c, _ in done)
    secs = max(s for _, s in done)
    print(json.dumps({
        "row": "redis",
        "contender": "powertools",
        "concurrency": processes,
        "ops": calls,
        "secs": round(secs, 6),
        "per_sec": round(calls / secs, 1),
    }))


if __name__ == "__main__":
    main()
