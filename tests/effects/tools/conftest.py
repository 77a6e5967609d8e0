"""What the tool tests share."""

from __future__ import annotations

from typing import Any

import anyio


async def ticking_while(work: Any) -> tuple[Any, int]:
    """Run `work()` while another task ticks every 10 ms; return its result and the ticks
    (a tool that blocks the event loop leaves the ticks near zero)."""
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as group:
        group.start_soon(tick)
        result = await work()
        group.cancel_scope.cancel()
    return result, ticks
