"""Seeded generator of process-queue messages: a few good ones, many broken ones.

Every message carries the fate the tracker owes it:

* ``processed``: a usable message (its payload, waiter or join is registered);
* ``failure``: reported as a batch item failure, so SQS retries it (a missing
  S3 object, an unknown workflow: retrying can help);
* ``invalid``: recorded as ``invalid-message/{message_id}`` with a reason
  (retrying cannot help).
"""

from __future__ import annotations

import base64
import json
import random
import string
from dataclasses import dataclass
from typing import Any

BUCKET = "fuzz-payloads"
GOOD_KEY = "good/payload.json"
NOT_JSON_KEY = "bad/not-json.json"
LIST_KEY = "bad/list.json"
POINTER_KEY = "bad/pointer.json"
HUGE_BYTES = 300 * 1024

# Few distinct good payloads keep moto's tables small.
GOOD_ITEMS = ("fuzz-a", "fuzz-b", "fuzz-c")
UNKNOWN_ITEMS = ("lost-a", "lost-b")


@dataclass
class Case:
    """One generated message."""

    message_id: str
    body: str
    kind: str  # what is wrong with it ("good-..." when nothing)
    fate: str  # processed | failure | invalid
    payload_ids: tuple[str, ...] = ()  # payloads a good message must have registered
    tokens: tuple[str, ...] = ()  # every task token the message carries


def payload(item: str = "fuzz-a", workflow: str = "pass", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item, "collection": "fuzz"}],
        "process": [{"workflow": workflow}],
    }
    body.update(extra)
    return body


def payload_id(item: str, workflow: str = "pass") -> str:
    return f"fuzz/workflow-{workflow}/{item}"


def token(rng: random.Random) -> str:
    """A token shaped like Step Functions' (long, base64), unique per call."""
    raw = bytes(rng.getrandbits(8) for _ in range(rng.randint(240, 560)))
    return "AQB" + base64.b64encode(raw).decode("ascii")


def s3_objects() -> dict[str, str]:
    """Objects the url cases point at (put them in ``BUCKET`` first)."""
    return {
        GOOD_KEY: json.dumps(payload("fuzz-c")),
        NOT_JSON_KEY: "{this is not json",
        LIST_KEY: json.dumps([payload("fuzz-c")]),
        POINTER_KEY: json.dumps({"url": f"s3://{BUCKET}/{GOOD_KEY}"}),
    }


class Generator:
    """Builds :class:`Case` objects from one seed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.count = 0

    def _case(
        self,
        body: Any,
        kind: str,
        fate: str,
        *,
        ids: tuple[str, ...] = (),
        tokens: tuple[str, ...] = (),
    ) -> Case:
        self.count += 1
        text = body if isinstance(body, str) else json.dumps(body)
        return Case(f"fuzz-{self.count:05d}", text, kind, fate, ids, tokens)

    # ------------------------------------------------------------------ good

    def good(self) -> Case:
        rng = self.rng
        item = rng.choice(GOOD_ITEMS)
        pid = payload_id(item)
        tok = token(rng)
        shape = rng.randrange(6)
        if shape == 0:
            return self._case(payload(item), "good-plain", "processed", ids=(pid,))
        if shape == 1:
            body = payload(item, callback={"task_token": tok, "parent_execution": "arn:p"})
            return self._case(body, "good-callback", "processed", ids=(pid,), tokens=(tok,))
        if shape == 2:
            body = {"payload": payload(item), "callback": {"task_token": tok}}
            return self._case(body, "good-envelope", "processed", ids=(pid,), tokens=(tok,))
        if shape == 3:
            sns = {"Type": "Notification", "Message": json.dumps(payload(item))}
            return self._case(sns, "good-sns", "processed", ids=(pid,))
        if shape == 4:
            members = rng.sample(GOOD_ITEMS, 2)
            body = {
                "join": {"task_token": tok, "quorum": 1},
                "payloads": [payload(member) for member in members],
            }
            ids = tuple(payload_id(member) for member in members)
            return self._case(body, "good-join", "processed", ids=ids, tokens=(tok,))
        body = {"url": f"s3://{BUCKET}/{GOOD_KEY}", "callback": {"task_token": tok}}
        return self._case(body, "good-url", "processed", ids=(payload_id("fuzz-c"),), tokens=(tok,))

    def odd_token(self) -> Case:
        """A token Step Functions would refuse, but a string: the tracker takes it."""
        odd = self.rng.choice(["  spaced token  ", "tøkèn-ünïcödé-✓", "line\nbreak", "{}", "x"])
        item = self.rng.choice(GOOD_ITEMS)
        body = payload(item, callback={"task_token": odd})
        return self._case(body, "odd-token", "processed", ids=(payload_id(item),))

    # ------------------------------------------------------------------- bad

    def bad(self) -> Case:
        makers = [
            self.invalid_json,
            self.wrong_type,
            self.missing_field,
            self.bad_url,
            self.invalid_join,
            self.bad_token,
            self.reserved_or_odd,
            self.unknown_workflow,
        ]
        case: Case = self.rng.choice(makers)()
        return case

    def huge(self) -> Case:
        rng = self.rng
        filler = "".join(rng.choices(string.ascii_letters, k=HUGE_BYTES))
        if rng.random() < 0.5:
            return self._case('{"features": "' + filler, "huge-invalid-json", "invalid")
        tok = token(rng)
        body = payload(f"huge-{rng.randrange(2)}", callback={"task_token": tok})
        body["features"][0]["properties"] = {"blob": filler}
        return self._case(body, "huge-payload", "invalid", tokens=(tok,))

    def invalid_json(self) -> Case:
        rng = self.rng
        good = json.dumps(payload())
        choices = [
            good[: rng.randrange(1, len(good) - 1)],
            "",
            "   ",
            "nul",
            "{'single': 'quotes'}",
            "[1, 2",
            good + "}",
            "".join(rng.choices(string.printable, k=rng.randint(1, 200))),
            "\x00\x01\x02",
            '{"a": NaN',
        ]
        return self._case(rng.choice(choices), "invalid-json", "invalid")

    def wrong_type(self) -> Case:
        rng = self.rng
        choices: list[Any] = [
            42,
            [payload()],
            "a string",
            None,
            True,
            payload(features="not-a-list"),
            payload(features=[{"id": 5, "collection": "fuzz"}]),
            payload(features=[7]),
            payload(process={"workflow": 5}),
            payload(process="pass"),
            payload(process=[]),
            payload(process=[1]),
            payload(process=[{"workflow": ["pass"]}]),
            payload(id=12345),
            payload(callback="not-an-object"),
            payload(callback=[1, 2]),
            {"payload": payload(), "callback": 17},
            {"Type": "Notification", "Message": {"not": "a string"}},
            {"Type": "Notification", "Message": "{broken"},
            {"wait_for": 5, "callback": {"task_token": "tok-wait-for-5"}},
        ]
        return self._case(rng.choice(choices), "wrong-type", "invalid")

    def missing_field(self) -> Case:
        rng = self.rng
        no_process = payload()
        no_process.pop("process")
        no_workflow = payload(process=[{"collections": "fuzz"}])
        no_features = payload()
        no_features.pop("features")
        no_item_id = payload(features=[{"type": "Feature", "collection": "fuzz"}])
        choices: list[Any] = [
            {},
            no_process,
            no_workflow,
            no_features,
            no_item_id,
            {"callback": {"task_token": "missing-everything-else-token"}},
            {"wait_for": "fuzz/workflow-pass/fuzz-a"},
            {"wait_for": "", "callback": {"task_token": "empty-wait-for-token"}},
        ]
        return self._case(rng.choice(choices), "missing-field", "invalid")

    def bad_url(self) -> Case:
        rng = self.rng
        invalid = [
            "http://example.com/payload.json",
            "s3://",
            "s3://bucket-only",
            "s3:///no-bucket",
            "file:///etc/passwd",
            f"s3://{BUCKET}/{NOT_JSON_KEY}",
            f"s3://{BUCKET}/{LIST_KEY}",
            f"s3://{BUCKET}/{POINTER_KEY}",
            5,
            None,
            ["s3://a/b"],
        ]
        missing = [f"s3://{BUCKET}/missing/{rng.randrange(3)}.json", "s3://no-such-bucket/k"]
        if rng.random() < 0.3:
            url = rng.choice(missing)
            if url.startswith("s3://no-such-bucket/"):
                # No retry makes a bucket appear: refused at once.
                return self._case({"url": url}, "url-missing-bucket", "invalid")
            return self._case({"url": url}, "url-missing-object", "failure")
        return self._case({"url": rng.choice(invalid)}, "bad-url", "invalid")

    def invalid_join(self) -> Case:
        rng = self.rng
        tok = token(rng)
        members = [payload("fuzz-a"), payload("fuzz-b")]
        choices: list[Any] = [
            {"join": "not-an-object", "payloads": members},
            {"join": {"task_token": tok, "quorum": 0}, "payloads": members},
            {"join": {"task_token": tok, "quorum": 3}, "payloads": members},
            {"join": {"task_token": tok, "quorum": -1}, "payloads": members},
            {"join": {"task_token": tok, "quorum": "two"}, "payloads": members},
            {"join": {"task_token": tok, "quorum": 1.5}, "payloads": members},
            {"join": {"task_token": tok}, "payloads": []},
            {"join": {"task_token": tok}},
            {"join": {"task_token": tok}, "payloads": "fuzz-a"},
            {"join": {"task_token": tok}, "payloads": [payload("fuzz-a"), 3]},
            {"join": {"task_token": tok}, "payloads": [payload("fuzz-a", process=[])]},
            {"join": {"task_token": tok, "join_id": "bad id with spaces!"}, "payloads": members},
            {"join": {"task_token": ""}, "payloads": members},
            {"join": {"quorum": 1}, "payloads": members},
            {"join": {"task_token": tok}, "payloads": [{"url": "http://nope"}]},
        ]
        return self._case(rng.choice(choices), "invalid-join", "invalid", tokens=(tok,))

    def bad_token(self) -> Case:
        rng = self.rng
        choices: list[Any] = ["", "A" * 9000, 12345, ["a", "b"], {"t": 1}, None, True]
        bad = rng.choice(choices)
        body = payload(rng.choice(GOOD_ITEMS), callback={"task_token": bad})
        kept = (bad,) if isinstance(bad, str) and len(bad) > 16 else ()
        return self._case(body, "bad-token", "invalid", tokens=kept)

    def reserved_or_odd(self) -> Case:
        rng = self.rng
        choices: list[Any] = [
            payload(id="join#mine"),
            payload(id="invalid-message/mine"),
            payload(process=[{"workflow": "pass", "idempotency_key": "features[0].nothing"}]),
            payload(process=[{"workflow": "pass", "idempotency_key": "[[[("}]),
            payload(process=[{"workflow": "no such/workflow!"}]),
            payload(process=[{"workflow": ""}]),
        ]
        if rng.random() < 0.1:
            # An empty id counts as no id: the cirrus id is computed (lenient, not an error).
            body = payload(id="")
            return self._case(body, "empty-id", "processed", ids=(payload_id("fuzz-a"),))
        return self._case(rng.choice(choices), "reserved-or-odd", "invalid")

    def unknown_workflow(self) -> Case:
        rng = self.rng
        item = rng.choice(UNKNOWN_ITEMS)
        workflow = rng.choice(["never-deployed", "retired"])
        tok = token(rng)
        body = payload(item, workflow=workflow, callback={"task_token": tok})
        return self._case(body, "unknown-workflow", "failure", tokens=(tok,))


def cases(seed: int, *, bad: int, good: int, huge: int, odd: int) -> list[Case]:
    """``bad + huge`` broken and ``good + odd`` usable messages, shuffled."""
    generator = Generator(seed)
    made = [generator.bad() for _ in range(bad)]
    made += [generator.huge() for _ in range(huge)]
    made += [generator.good() for _ in range(good)]
    made += [generator.odd_token() for _ in range(odd)]
    generator.rng.shuffle(made)
    return made
