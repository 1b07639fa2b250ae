#!/usr/bin/env python3
"""An agent's memory loop over ``engram serve``.

Each turn the agent remembers what was said, recalls what it knows about
this user (a filter on the user scope), assembles the working memory for
its model call, and writes its answer back. When the user corrects a fact,
the agent corrects the record (history keeps both versions); when the user
asks to be forgotten, it deletes what they said.

Run against a server (a key with ``--role agent`` or ``user``)::

    ENGRAM_URL=http://127.0.0.1:7878 ENGRAM_KEY=egk_... python agent_loop.py

The "model" here is a stand-in that quotes what memory gave it; swap in a
real LLM call where ``answer`` is.
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import List

from engram_client import Client, NotFound

USER = "user_18"


def answer(prompt_memory: str, question: str) -> str:
    """Stand-in for a model call: the first remembered line that shares a word."""
    words = {w.strip("?.,").lower() for w in question.split() if len(w) > 3}
    for line in prompt_memory.splitlines():
        if words & {w.strip("?.,:").lower() for w in line.split()}:
            return f"From memory: {line.strip()}"
    return "I don't know yet."


def main() -> int:
    url = os.environ.get("ENGRAM_URL", "http://127.0.0.1:7878")
    key = os.environ.get("ENGRAM_KEY")
    if not key:
        print("set ENGRAM_KEY to an API key (engram keys create ...)", file=sys.stderr)
        return 2
    conv = f"conv_{uuid.uuid4().hex[:8]}"  # one conversation per run
    turns: List[str] = [
        "I'm moving our billing to the Pro plan next month.",
        "My invoices should go to finance@example.com.",
        "What plan am I moving to?",
    ]
    with Client(url, key) as db:
        for i, text in enumerate(turns, start=1):
            # 1. remember the user's turn (external ids make re-sends safe)
            db.append(
                [
                    {
                        "kind": "user_message",
                        "external_id": f"{conv}/{i}",
                        "text": text,
                        "scope": {"user": USER, "conversation": conv},
                    }
                ]
            )
            # 2. recall what we know about this user, filtered by scope
            hits = db.recall(text=text, user=USER, k=3)["hits"]
            print(f"turn {i}: {text!r}; recalled {[h['external_id'] for h in hits]}")
            # 3. assemble the working memory for the model call
            ctx = db.context(text, user=USER, conversation=conv, budget_bytes=2048)
            reply = answer(ctx["rendered"], text)
            print(f"  agent: {reply}")
            db.append(
                [
                    {
                        "kind": "assistant_message",
                        "external_id": f"{conv}/{i}/reply",
                        "text": reply,
                        "scope": {"user": USER, "conversation": conv},
                    }
                ]
            )

        # 4. the user corrects a fact: supersede the record, keep its history
        fixed = db.correct(
            f"{conv}/2",
            {
                "kind": "user_message",
                "text": "My invoices should go to billing@example.com.",
            },
        )
        versions = db.history(f"{conv}/2")["versions"]
        print(f"corrected {conv}/2 -> {fixed['record']['id']} ({len(versions)} versions)")
        hits = db.recall(text="where do invoices go", user=USER, k=1)["hits"]
        print(f"  recall now says: {hits[0]['text']!r}")

        # 5. the user asks to forget the conversation: delete what they said
        # and the agent's replies, which quote it (an event cites no
        # sources, so a deletion reaches a reply only when it is named)
        for i in range(1, len(turns) + 1):
            for ref in (f"{conv}/{i}", f"{conv}/{i}/reply"):
                db.delete(ref, reason="user asked to be forgotten")
        try:
            db.get(f"{conv}/1")
            print("still there?!")
            return 1
        except NotFound:
            pass
        left = db.recall(text="invoices billing plan", user=USER, conversation=conv, k=10)
        if left["hits"]:
            print(f"still recalled after deletion: {[h['external_id'] for h in left['hits']]}")
            return 1
        print(f"deleted {len(turns)} turns of {conv} and the replies: gone at once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
