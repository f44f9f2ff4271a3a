"""Only InboxAggregate changes inbox item state (seed §8: scheduler, heartbeat and confirmation
rollback no longer call store state methods).

An AST scan of every module under src/genworker. Outside the aggregate nothing may:

- call or reference the store's compare-and-set primitive (`store-primitive`),
- call `claim` on something named like a store — claim through `InboxAggregate.claim`, which also
  dead-letters crash loops (`store-claim`),
- `replace(...)` or build an `InboxItem` with `state=InboxState.…`, or, in a module that uses
  inbox values, with lease fields or attempts (`item-state`; the store modules are exempt: they
  implement the claim),
- join an "inbox" path segment or spell "runtime/inbox" (`inbox-path`; only the file store may).

The checker is tested on synthetic snippets so that it cannot silently stop seeing things.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import genworker
from genworker.autonomy.inbox.store import InboxStore
from genworker.testing.ast_rules import Violation, docstring_ids, uses_names

SRC = Path(genworker.__file__).resolve().parent
AGGREGATE = "autonomy/inbox/aggregate.py"
FILE_STORE = "autonomy/inbox/file_store.py"
STORES = frozenset({"autonomy/inbox/store.py", FILE_STORE, "autonomy/inbox/redis_store.py"})
PRIMITIVES = frozenset({"compare_and_set", "compare_and_set_many", "delete_consumed"})
READS = frozenset({"write", "get", "list", "counts"})
LEASE_FIELDS = frozenset({"lease_owner", "lease_expires_at", "attempts", "retry_at"})
INBOX_VALUES = frozenset({"InboxItem", "InboxState"})
PATH_CALLS = frozenset({"safe_join", "joinpath", "Path", "PurePath", "PurePosixPath", "join"})


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    return ""


def _is_inbox(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == "inbox"


def violations(source: str, *, exempt: frozenset[str] = frozenset()) -> list[Violation]:
    """Every rule not in `exempt` broken by `source`."""
    tree = ast.parse(source)
    docstrings = docstring_ids(tree)
    uses_items = uses_names(tree, INBOX_VALUES)
    found = [v for node in ast.walk(tree) for v in _check(node, docstrings, uses_items) if v.rule not in exempt]
    return sorted(found, key=lambda v: (v.line, v.rule))


def _check(node: ast.AST, docstrings: set[int], uses_items: bool) -> Iterator[Violation]:
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.Attribute) and node.attr in PRIMITIVES:
        yield Violation(line, "store-primitive", node.attr)
    elif isinstance(node, ast.Call):
        name = _dotted(node.func)
        if name.endswith(".claim") and "store" in name.removesuffix(".claim").lower():
            yield Violation(line, "store-claim", name)
        if name.rpartition(".")[2] == "getattr" and any(
            isinstance(a, ast.Constant) and a.value in PRIMITIVES for a in node.args
        ):
            yield Violation(line, "store-primitive", "getattr(...)")
        short = name.rpartition(".")[2]
        fields = sorted(
            kw.arg
            for kw in node.keywords
            if (kw.arg in LEASE_FIELDS and uses_items) or (kw.arg == "state" and "InboxState" in _dotted(kw.value))
        )
        if fields and short in {"replace", "InboxItem"}:
            yield Violation(line, "item-state", f"{short}(..., {', '.join(f'{f}=' for f in fields)})")
        if short in PATH_CALLS and any(_is_inbox(arg) for arg in node.args):
            yield Violation(line, "inbox-path", f"{short}(... 'inbox' ...)")
    elif (
        isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and (_is_inbox(node.left) or _is_inbox(node.right))
    ):
        yield Violation(line, "inbox-path", "/ 'inbox'")
    elif (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and "runtime/inbox" in node.value
    ):
        yield Violation(line, "inbox-path", repr(node.value))


def exemptions(rel: str) -> frozenset[str]:
    if rel == AGGREGATE:
        return frozenset({"store-primitive", "store-claim", "item-state"})
    if rel == FILE_STORE:
        return frozenset({"item-state", "inbox-path"})
    if rel in STORES:
        return frozenset({"item-state"})
    return frozenset()


def modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def rel(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


# -- the real source ----------------------------------------------------------------


def test_the_scan_covers_the_package() -> None:
    names = {rel(p) for p in modules()}
    assert names >= {AGGREGATE, *STORES}, "an inbox module was renamed: update the constants"


def test_the_store_methods_are_classified() -> None:
    public = {name for name in vars(InboxStore) if not name.startswith("_") and callable(getattr(InboxStore, name))}
    assert public == READS | PRIMITIVES | {"claim"}, "an InboxStore method was added or renamed: classify it here"


@pytest.mark.parametrize("path", modules(), ids=rel)
def test_only_the_aggregate_changes_inbox_state(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert violations(source, exempt=exemptions(rel(path))) == []


def test_the_exempt_modules_are_what_the_checker_flags() -> None:
    """Scanned without their exemption, they light up: the checker sees real code."""
    aggregate = violations((SRC / AGGREGATE).read_text(encoding="utf-8"))
    assert {"store-primitive", "store-claim", "item-state"} <= {v.rule for v in aggregate}
    assert {v.rule for v in violations((SRC / "autonomy/inbox/store.py").read_text(encoding="utf-8"))} == {"item-state"}
    assert "inbox-path" in {v.rule for v in violations((SRC / FILE_STORE).read_text(encoding="utf-8"))}


# -- the checker itself -------------------------------------------------------------

BAD = {
    "store-primitive": [
        "await store.compare_and_set(item, 3)",
        "await self._inbox.compare_and_set(replace(item), item.version)",
        "cas = store.compare_and_set",
        "f = getattr(store, 'compare_and_set')",
    ],
    "store-claim": [
        "items = await store.claim('t', 'w', 'me', limit=5, lease_s=30)",
        "items = await self._inbox_store.claim(t, w, owner, limit=1, lease_s=1)",
        "items = await runtime.stores.inbox.claim(t, w, o, limit=1, lease_s=1)",
    ],
    "item-state": [
        "from genworker.autonomy.inbox import InboxState\nitem = replace(item, state=InboxState.CONSUMED)",
        "from genworker.autonomy.inbox import InboxItem\nx = dataclasses.replace(x, lease_owner=None, attempts=0)",
        "from genworker.autonomy.inbox.models import InboxItem\nx = replace(x, retry_at=None)",
        "x = InboxItem(item_id='i', state=InboxState.DEAD, **rest)",
        "item = dataclasses.replace(item, state=inbox.InboxState.PENDING)",
        "x = models.InboxItem(item_id='i', retry_at=None, **rest)",
    ],
    "inbox-path": [
        "p = worker_dir / 'runtime' / 'inbox' / 'pending'",
        "p = safe_join(root, 'tenants', t, 'workers', w, 'runtime', 'inbox')",
        "p = root.joinpath('runtime', 'inbox')",
        "open(f'{root}/runtime/inbox/pending/{name}', 'rb')",
    ],
}

GOOD = [
    "items = await inbox.claim('t', 'w', 'me', limit=5, lease_s=30)",
    "items = await self._aggregate.claim(t, w, owner)",
    "await inbox.consume(item, owner)\nawait inbox.fail(item, owner, 'boom')",
    "ok = await store.write(new_item('t', 'w', 'git', 'r', 'git.commit', {}))",
    "items = await store.list(t, w, InboxState.DEAD, limit=20)\ncounts = await store.counts(t, w)",
    "lock = await thread_lock.claim(t, thread)",  # not a store
    "run = replace(run, state='done')",
    "from genworker.autonomy.inbox import InboxItem\nstatus = replace(status, state='degraded', reason=r)",
    "run = replace(run, attempts=2, retry_at=None)",  # no inbox values in this module
    "from genworker.autonomy.inbox import InboxItem\nx = replace(item, route='task', payload={})",
    "from genworker.autonomy.inbox import InboxItem\nx = InboxItem(item_id='i', tenant_id='t', worker_id='w')",
    'def f() -> None:\n    """Items live in runtime/inbox/."""',
    "mailbox = 'INBOX'\nfolder = imap.select('inbox')",
]


@pytest.mark.parametrize(("rule", "snippet"), [(r, s) for r, snippets in BAD.items() for s in snippets])
def test_the_checker_flags(rule: str, snippet: str) -> None:
    assert rule in {v.rule for v in violations(snippet)}, snippet


@pytest.mark.parametrize("snippet", GOOD)
def test_the_checker_allows(snippet: str) -> None:
    assert violations(snippet) == []


def test_violations_name_their_line() -> None:
    source = "import os\n\n\nasync def f(store, item):\n    await store.compare_and_set(item, 1)\n"
    assert violations(source) == [Violation(5, "store-primitive", "compare_and_set")]
