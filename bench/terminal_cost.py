"""What the terminal sanitiser costs per streamed delta (a timing script, not a test).

Times `ruizn.terminal.visible` over 20,000 deltas shaped like a real answer (1-3 words,
some newlines, some CJK) and over the same deltas with an escape in every 50th, beside the
alternatives that were tried, so the choice can be checked again. Then the other per-delta
steps: `Redactor.redact_event` with two secrets, and the whole StdoutPrinter into /dev/null.
For scale: the raw SDK's text_stream does about 12.4k deltas/s here, ~80 µs a delta
(bench/README.md).

    python bench/terminal_cost.py
"""

from __future__ import annotations

import random
import timeit

from ruizn.cli import printer as printer_module
from ruizn.cli.printer import StdoutPrinter
from ruizn.events import LlmToken
from ruizn.redact import Redactor
from ruizn.terminal import _TABLE, visible

N = 20_000
rng = random.Random(7)
words = [
    "the ",
    "file ",
    "README",
    ".md ",
    "describes ",
    "读取",
    "当前目录",
    "下的 ",
    "a ",
    "x",
    "\n",
    "- ",
    "`code` ",
    "\n\n",
]
clean = ["".join(rng.choice(words) for _ in range(rng.randint(1, 3))) for _ in range(N)]
dirty = [d + "\x1b[2J" if i % 50 == 0 else d for i, d in enumerate(clean)]


def translate_always(text: str) -> str:
    return text.translate(_TABLE)


def isprintable_precheck(text: str) -> str:
    # False for "\n" and "\t" too, so every delta with a newline pays for translate.
    return text if text.isprintable() else text.translate(_TABLE)


def identity(text: str) -> str:
    return text


def per_delta_ns(fn, deltas) -> float:
    def loop() -> None:
        for d in deltas:
            fn(d)

    best = min(timeit.repeat(loop, number=1, repeat=15))
    return best / len(deltas) * 1e9


if __name__ == "__main__":
    base = per_delta_ns(identity, clean)
    print(f"{N:,} deltas; loop + call overhead {base:.0f} ns/delta (subtracted below)")
    for name, fn in [
        ("visible (character-class pre-check)", visible),
        ("translate always", translate_always),
        ("isprintable pre-check", isprintable_precheck),
    ]:
        for label, deltas in [("clean", clean), ("1 in 50 with ESC", dirty)]:
            ns = per_delta_ns(fn, deltas) - base
            print(
                f"{name:36} {label:18} {ns:6.0f} ns/delta  = {ns * N / 1e6:5.2f} ms per 20k deltas"
                f"  ({ns / 80_000:.2%} of the raw SDK's ~80 µs/delta)"
            )

    events = [LlmToken(seq=i, ts=0.0, text=d) for i, d in enumerate(clean)]
    redactor = Redactor(secrets=("sk-ant-api03-" + "x" * 90, "ghp_" + "y" * 36))
    ns = per_delta_ns(redactor.redact_event, events) - base
    print(f"{'Redactor.redact_event, 2 secrets':36} {'clean':18} {ns:6.0f} ns/delta")

    with open("/dev/null", "w", encoding="utf-8") as sink:
        printer = StdoutPrinter(sink)
        ns = per_delta_ns(printer, events) - base
        print(f"{'StdoutPrinter to /dev/null (all in)':36} {'clean':18} {ns:6.0f} ns/delta")
        printer_module.visible = identity  # the printer as it was before the sanitiser
        ns = per_delta_ns(StdoutPrinter(sink), events) - base
        print(f"{'  the same without visible':36} {'clean':18} {ns:6.0f} ns/delta")
