"""The Models API's answers kept in the state folder for a day (effects/models/keptfacts.py),
through the real SDK against the local API, which counts its Models API requests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from attrs import evolve

from ruizn.effects.models.anthropic import AnthropicProvider
from ruizn.effects.models.catalog import remember_facts
from ruizn.effects.models.keptfacts import FactsFile, KeptFacts
from ruizn.modelfacts import FACTS_KEPT_FOR, ModelFacts
from tests.cli.conftest import API_KEY, cli_env, run_cli
from tests.fakeapi import FakeAnthropic, Stream, Text

pytestmark = pytest.mark.anyio
KEY = "sk-ant-kept-facts-SECRET"
MODEL = "claude-sonnet-5-5"


def answer(body: dict[str, Any], index: int) -> Stream:
    return Stream((Text("ok"),))


@pytest.fixture
def server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(answer) as started:
        yield started


async def describe(server: FakeAnthropic, state: Path, model: str = MODEL) -> ModelFacts | None:
    """What a new run's provider learns of `model`, as a new process would."""
    provider = AnthropicProvider(api_key=KEY, base_url=server.base_url, kept_facts=FactsFile(state))
    try:
        return await provider.catalog.describe(model)
    finally:
        await provider.aclose()


def kept_file(state: Path) -> Path:
    (path,) = (state / "model-facts").glob("*.json")
    return path


async def test_a_kept_answer_is_used_without_asking_and_holds_no_key(
    server: FakeAnthropic, tmp_path: Path
) -> None:
    asked = await describe(server, tmp_path)
    assert asked is not None
    assert asked.context_window is not None
    assert await describe(server, tmp_path) == asked
    assert server.model_gets == [f"/v1/models/{MODEL}"]  # the second run did not ask
    path = kept_file(tmp_path)
    for text in (path.name, path.read_text()):
        assert KEY not in text
        assert "kept-facts" not in text


async def test_another_key_or_endpoint_asks_for_itself(
    server: FakeAnthropic, tmp_path: Path
) -> None:
    await describe(server, tmp_path)
    other = AnthropicProvider(
        api_key=KEY + "2", base_url=server.base_url, kept_facts=FactsFile(tmp_path)
    )
    try:
        assert await other.catalog.describe(MODEL) is not None
    finally:
        await other.aclose()
    assert len(server.model_gets) == 2
    assert len(list((tmp_path / "model-facts").glob("*.json"))) == 2


@pytest.mark.parametrize(
    ("age", "lifecycle", "known"),
    [
        (FACTS_KEPT_FOR + 1, "active", True),  # a day old: refreshed
        (-3600, "active", True),  # from the future: not trusted
        (0, "retired", True),  # retired: asked again before it refuses a run
        (0, "active", False),  # unknown: asked again
    ],
)
async def test_a_stale_retired_or_unknown_answer_is_asked_again(
    server: FakeAnthropic, tmp_path: Path, age: float, lifecycle: str, known: bool
) -> None:
    facts = await describe(server, tmp_path)
    assert facts is not None
    # What an older answer said: the model retired, or a window the API no longer states.
    planted = evolve(facts, lifecycle=lifecycle, context_window=1) if known else None
    kept_file(tmp_path).unlink()
    _plant(FactsFile(tmp_path), server, planted, time.time() - age)
    assert await describe(server, tmp_path) == facts  # the API's answer, asked again
    assert len(server.model_gets) == 2
    assert await describe(server, tmp_path) == facts  # and kept anew
    assert len(server.model_gets) == 2


@pytest.mark.parametrize(
    "content",
    [
        b"not json{",
        b"[]",
        b'{"v": 1, "models": []}',
        b'{"v": 99, "models": {}}',
        b'{"v": 1, "models": {"MODEL": "x"}}',
        b'{"v": 1, "models": {"MODEL": {"asked_at": "NOW", "facts": {"id": "MODEL"}}}}',
        b'{"v": 1, "models": {"MODEL": {"asked_at": NOW, "facts": {"id": "other"}}}}',
        b'{"v": 1, "models": {"MODEL": {"asked_at": NOW, "facts": {"id": 5}}}}',
        b'{"v": 1, "models": {"MODEL": {"asked_at": NOW, "facts": {"id": "MODEL",'
        b' "lifecycle": "immortal"}}}}',
        b'{"v": 1, "models": {"MODEL": {"asked_at": NOW, "facts": {"id": "MODEL",'
        b' "context_window": "1"}}}}',
        b"\xff\xfe\x00",
    ],
)
async def test_a_corrupt_file_is_ignored_and_asked_again(
    server: FakeAnthropic, tmp_path: Path, content: bytes
) -> None:
    facts = await describe(server, tmp_path)
    path = kept_file(tmp_path)
    now = str(int(time.time())).encode()
    path.write_bytes(content.replace(b"MODEL", MODEL.encode()).replace(b"NOW", now))
    assert await describe(server, tmp_path) == facts
    assert len(server.model_gets) == 2


async def test_a_state_folder_that_cannot_be_written_only_asks(
    server: FakeAnthropic, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert await describe(server, blocker) is not None
    assert await describe(server, blocker) is not None
    assert len(server.model_gets) == 2


async def test_a_run_starts_without_asking_the_models_api_when_an_answer_is_kept(
    workspace: Path, server: FakeAnthropic, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    # Asked once with the CLI's key, into the state folder the run reads (RUIZN_STATE_DIR).
    provider = AnthropicProvider(
        api_key=API_KEY, base_url=server.base_url, kept_facts=FactsFile(state)
    )
    try:
        assert await provider.catalog.describe(MODEL) is not None
    finally:
        await provider.aclose()
    env = cli_env(server.base_url, RUIZN_STATE_DIR=str(state))
    result = await anyio.to_thread.run_sync(
        lambda: run_cli(["run", "--model", MODEL, "hi"], workspace=workspace, env=env)
    )
    assert result.code == 0, result.stderr
    assert server.model_gets == [f"/v1/models/{MODEL}"]  # the run did not ask again
    # It had what the Models API said all the same: adaptive thinking.
    assert server.requests[0].body["thinking"]["type"] == "adaptive"


def _plant(store: FactsFile, server: FakeAnthropic, facts: ModelFacts | None, at: float) -> None:
    """An answer kept under the key and endpoint `describe` uses."""
    import hashlib

    digest = hashlib.sha256(KEY.encode()).hexdigest()[:16]
    store.write(server.base_url, digest, MODEL, KeptFacts(facts=facts, asked_at=at))


async def test_a_fleets_remembered_retired_model_is_asked_again(
    server: FakeAnthropic, tmp_path: Path
) -> None:
    remember_facts(300)  # as a fleet process does
    try:
        for _ in range(2):
            facts = await describe(server, tmp_path, "claude-sonnet-4-5")
            assert facts is not None
            assert facts.lifecycle == "retired"
        await describe(server, tmp_path)
        await describe(server, tmp_path)
    finally:
        remember_facts(0)
    # The retired model asked both times; the active one once.
    assert server.model_gets == [
        "/v1/models/claude-sonnet-4-5",
        "/v1/models/claude-sonnet-4-5",
        f"/v1/models/{MODEL}",
    ]
