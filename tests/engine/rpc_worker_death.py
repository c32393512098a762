"""Child process of test_rpc.py's worker-death test (a separate process, so that a regression
aborts this child, not pytest). Talks with the test over stdin/stdout, one line each way:

    python tests/engine/rpc_worker_death.py TARGET DRAFT ENDPOINT[,ENDPOINT…] KILLED_ENDPOINT between|during

1. loads TARGET on the workers (-ngl -1) with DRAFT local and generates greedily (the reference);
2. `between`: starts the same generation, takes 3 events, prints "KILL" and waits for a line
   (the test kills the worker at KILLED_ENDPOINT between two forwards of the running
   generation). `during`: prints "KILL" and starts a generation whose prompt takes a long
   forward (the test kills the worker while it runs);
3. iterates on: the generation must end with WorkerLostError naming that worker; a second
   request must get the same error; the engine must close without aborting;
4. prints "CLOSED" and waits for a line (the test restarts the worker on the same port);
5. loads the pair again and generates: the output must equal the reference.

The last line is "RESULT <json>" with what happened at each step.
"""

from __future__ import annotations

import json
import sys
import time

from localspec.engine import Engine, GenerationRequest, ModelSpec
from localspec.engine.llama import rpc
from localspec.errors import WorkerLostError

PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"


def _engine(target: str, draft: str, workers: tuple[str, ...]) -> Engine:
    return Engine(ModelSpec(target, n_ctx=512, n_gpu_layers=-1, rpc=workers), ModelSpec(draft, n_ctx=512))


def _request() -> GenerationRequest:
    return GenerationRequest(prompt=PROMPT, max_tokens=24, drafter="model", gamma=3)


def _tell(line: str) -> str:
    """Print `line` to the test and wait for its answer."""
    print(line, flush=True)
    return sys.stdin.readline().strip()


def main() -> None:
    target, draft, endpoints, killed, when = (sys.argv[1], sys.argv[2], tuple(sys.argv[3].split(",")), sys.argv[4],
                                              sys.argv[5])
    result: dict[str, object] = {}
    engine = _engine(target, draft, endpoints)
    want = "".join(e.text for e in engine.generate(_request()))
    result["reference"] = want
    result["watched"] = {e: rpc.gone(e) is None for e in endpoints}

    before: list[str] = []
    if when == "between":
        gen = engine.generate(_request())
        it = iter(gen)
        before = [next(it).text for _ in range(3)]
        result["answer_to_kill"] = _tell("KILL")
        deadline = time.monotonic() + 10
        while rpc.gone(killed) is None and time.monotonic() < deadline:  # the kernel's FIN may trail the kill
            time.sleep(0.01)
        result["seen_gone"] = rpc.gone(killed)
    else:  # a prompt of ~350 tokens: one forward of seconds on one-thread workers
        long_prompt = "".join(f"def f{i}(x):\n    return x * {i} + {i * i}\n\n" for i in range(20))
        gen = engine.generate(GenerationRequest(prompt=long_prompt, max_tokens=8, drafter="none"))
        it = iter(gen)
        print("KILL", flush=True)  # the test kills the worker while the prefill runs
    t0 = time.monotonic()
    try:
        after = [e.text for e in it]
        result["first"] = {"error": None, "events_after_kill": len(after)}
    except WorkerLostError as exc:
        result["first"] = {"error": type(exc).__name__, "endpoint": exc.endpoint, "message": str(exc)}
    result["seconds_to_error"] = round(time.monotonic() - t0, 2)
    result["text_before_kill"] = "".join(before)
    gen.close()
    if when == "during":
        result["answer_to_kill"] = sys.stdin.readline().strip()

    try:
        text = "".join(e.text for e in engine.generate(_request()))
        result["second"] = {"error": None, "text": text}
    except WorkerLostError as exc:
        result["second"] = {"error": type(exc).__name__, "endpoint": exc.endpoint, "message": str(exc)}
    result["tokenize_after"] = len(engine.tokenize("still here"))
    engine.close()
    result["answer_to_closed"] = _tell("CLOSED")

    again = _engine(target, draft, endpoints)
    try:
        result["after_restart"] = "".join(e.text for e in again.generate(_request()))
    finally:
        again.close()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
