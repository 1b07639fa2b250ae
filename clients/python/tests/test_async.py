"""The async client against the real server: concurrent appends, reads,
bulk from an async generator, errors."""

from __future__ import annotations

from typing import Any, AsyncIterator, Dict

import anyio
import pytest
from conftest import Session

from engram_client import AsyncClient, Forbidden, NotFound, Unauthorized

pytestmark = pytest.mark.anyio


async def test_async_endpoints(session: Session, uniq: str) -> None:
    url, keys = session.server.url, session.keys
    async with AsyncClient(url, keys["user"]) as db, AsyncClient(url, keys["other"]) as other:
        assert await db.health() == {"status": "ok"}
        assert await db.ready() == {"status": "ready"}
        assert "engram_up" in await db.metrics()

        results: Dict[int, Any] = {}

        async def one(i: int) -> None:
            results[i] = await db.append(
                [
                    {
                        "kind": "turn",
                        "external_id": f"{uniq}-{i}",
                        "text": f"async turn {i}",
                        "scope": {"user": f"u-{uniq}", "conversation": f"c-{uniq}"},
                    }
                ]
            )

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(one, i)
        assert sorted(results) == list(range(20))
        assert all(r["created"] == 1 for r in results.values())

        rec = await db.get(f"{uniq}-7")
        assert rec["text"] == "async turn 7"
        assert len((await db.list(kind="turn", limit=1000))["records"]) >= 20
        hits = (await db.recall(text="async turn", user=f"u-{uniq}", k=50))["hits"]
        assert len(hits) == 20
        c = await db.correct(f"{uniq}-7", {"kind": "turn", "text": "async turn seven"})
        assert c["record"]["text"] == "async turn seven"
        assert len((await db.history(f"{uniq}-7"))["versions"]) == 2
        assert (await db.trace(f"{uniq}-7"))["target"] == c["record"]["id"]
        ctx = await db.context("async turn", user=f"u-{uniq}", conversation=f"c-{uniq}")
        assert "async turn" in ctx["rendered"]
        ev = await db.eval(
            [{"case_id": "a", "query": "async turn seven", "relevant_ids": [f"{uniq}-7"]}]
        )
        assert ev["overall"]["cases"] == 1
        op = await db.delete(f"{uniq}-3", reason="test")
        assert op["affected"]
        with pytest.raises(NotFound):
            await db.get(f"{uniq}-3")
        with pytest.raises(NotFound):
            await other.get(f"{uniq}-4")  # another tenant: like missing
        with pytest.raises(Forbidden):
            await db.stats()
        assert (await db.openapi())["paths"]


async def test_async_bulk_from_an_async_generator(session: Session, uniq: str) -> None:
    async def gen() -> AsyncIterator[Dict[str, Any]]:
        for i in range(12):
            await anyio.sleep(0)
            yield {"kind": "note", "external_id": f"{uniq}-{i}", "text": f"async bulk {i}"}

    async with AsyncClient(session.server.url, session.keys["user"]) as db:
        stream = db.bulk(gen(), batch=4, lines_per_request=8)
        lines = [r["line"] async for r in stream]
        assert lines == list(range(1, 13))
        s = stream.summary
        assert (s["created"], s["batches"], s["requests"], s["complete"]) == (12, 3, 2, True)
        again = await db.bulk(
            [{"kind": "note", "external_id": f"{uniq}-0", "text": "async bulk 0"}]
        ).run()
        assert again["duplicates"] == 1


async def test_async_wrong_key(session: Session) -> None:
    async with AsyncClient(session.server.url, "egk_" + "f" * 64) as db:
        with pytest.raises(Unauthorized) as e:
            await db.recall(text="anything")
        assert e.value.status == 401
