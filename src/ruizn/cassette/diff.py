"""Two runs compared event by event (`ruizn diff A B`). Pure.

Each event is compared as the JSON its line holds, without what must differ between two runs
of the same thing: the clock (`ts`, a tool's `duration`, a session's `elapsed`), the ids the
run and the server gave (`run_id`, `request_id`), the ruizn that wrote it, the lineage of a
fork or a rerun (`parent`), where the run happened (the workspace in run_started and
run_resumed: a rerun runs in today's checkout) and the bytes a crash tore off (`torn_bytes`).
A model's streamed text is compared as the text of each call, not delta by delta: how a
stream was cut into chunks is the network's doing, not the run's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from attrs import frozen

from ruizn.events import Event, LlmToken
from ruizn.serde import converter
from ruizn.state import ExecutionContext, Status, TextBlock, ToolResultBlock, ToolUseBlock, Usage

# Per event type, the fields that differ between any two runs; `ts` never counts.
IGNORED: dict[str, frozenset[str]] = {
    "run_started": frozenset({"run_id", "ruizn_version", "parent"}),
    "run_resumed": frozenset({"workspace", "torn_bytes"}),
    "llm_response": frozenset({"request_id"}),
    "llm_call_failed": frozenset({"request_id"}),
    "tool_call_finished": frozenset({"duration"}),
    "run_finished": frozenset({"elapsed"}),
}
# Inside run_started's settings: the workspace, resolved where the run happened.
IGNORED_SETTINGS = frozenset({"workspace"})


@frozen(kw_only=True)
class Item:
    """One event as it is compared; a run of llm_token events is one item (their text)."""

    seq: int
    type: str
    body: dict[str, Any]


@frozen(kw_only=True)
class Difference:
    """The first place two runs part: an item of each (None: that run ended there)."""

    a: Item | None
    b: Item | None

    def fields(self) -> tuple[str, ...]:
        """The fields that differ when both items are of one type (`settings.system`...)."""
        if self.a is None or self.b is None or self.a.type != self.b.type:
            return ()
        return tuple(_differing(self.a.body, self.b.body))


def items(events: Iterable[Event]) -> Iterator[Item]:
    """The events as they are compared, in order."""
    tokens: list[str] = []
    first = 0
    for event in events:
        if type(event) is LlmToken:
            if not tokens:
                first = event.seq
            tokens.append(event.text)
            continue
        if tokens:
            yield Item(seq=first, type=LlmToken.TAG, body={"text": "".join(tokens)})
            tokens = []
        yield Item(seq=event.seq, type=event.TAG, body=_body(event))
    if tokens:
        yield Item(seq=first, type=LlmToken.TAG, body={"text": "".join(tokens)})


def _body(event: Event) -> dict[str, Any]:
    body: dict[str, Any] = converter.unstructure(event)
    ignored = IGNORED.get(event.TAG, frozenset())
    body = {k: v for k, v in body.items() if k not in ignored and k not in ("seq", "ts")}
    if "settings" in body:
        body["settings"] = {k: v for k, v in body["settings"].items() if k not in IGNORED_SETTINGS}
    return body


def first_difference(a: Iterable[Item], b: Iterable[Item]) -> Difference | None:
    """Where the two runs first differ, or None: the same run but for what must differ."""
    left, right = iter(a), iter(b)
    while True:
        x, y = next(left, None), next(right, None)
        if x is None and y is None:
            return None
        if x is None or y is None or x.type != y.type or x.body != y.body:
            return Difference(a=x, b=y)


def _differing(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key in dict.fromkeys([*a, *b]):
        x, y = a.get(key), b.get(key)
        if x == y:
            continue
        if isinstance(x, dict) and isinstance(y, dict) and not prefix:
            yield from _differing(x, y, f"{key}.")
        else:
            yield prefix + key


@frozen(kw_only=True)
class Summary:
    """A run in the few numbers people compare."""

    run_id: str
    status: Status
    steps: int
    usage: Usage
    tool_calls: tuple[tuple[str, int, int], ...]  # (tool, calls, failed), most called first
    answer: str  # the text of the model's last answer


def summary(state: ExecutionContext) -> Summary:
    names: dict[str, str] = {}
    calls: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    answer = ""
    for message in state.messages:
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                names[block.id] = block.name
                calls[block.name] += 1
            elif isinstance(block, ToolResultBlock) and block.is_error:
                failed[names.get(block.tool_use_id, "?")] += 1
        if message.role == "assistant":
            answer = "".join(b.text for b in message.content if isinstance(b, TextBlock))
    return Summary(
        run_id=state.run_id,
        status=state.status,
        steps=state.step,
        usage=state.usage,
        tool_calls=tuple((name, count, failed[name]) for name, count in calls.most_common()),
        answer=answer,
    )
