"""The event bus: every event goes to every subscriber, in subscription order."""

from __future__ import annotations

from collections.abc import Callable

from ruizn.events import Event

Subscriber = Callable[[Event], None]


class EventBus:
    def __init__(self, *subscribers: Subscriber) -> None:
        self._subscribers: list[Subscriber] = list(subscribers)

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def publish(self, event: Event) -> None:
        # Synchronous on purpose: when publish returns, the line is on disk (the writer is
        # subscribed first), so the state is never ahead of the log.
        for subscriber in self._subscribers:
            subscriber(event)
