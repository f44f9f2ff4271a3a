"""A service worker's knowledge sources (PERSONA `service.knowledge_sources`) as the context gets them:
files and folders in the worker folder searched by the words of the message; a source naming nothing
searchable (a URL, another type) is noted at load and never read; nothing outside the folder is read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from genworker.worker.knowledge import KnowledgeSearch, passages, terms
from genworker.workspace.documents import read_markdown, validate
from genworker.workspace.models import PersonaSpec
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker

PERSONA = """---
identity: {{name: Desk, worker_id: desk}}
mode: service
service:
  knowledge_sources:
{sources}
---
You answer questions.
"""
FAQ = """# Accounts

Password reset: use the 'Forgot password' link on the sign-in page.

Two-factor codes come by SMS.

# Billing

Invoices are sent on the first working day of the month.
"""


def load(write_tree: Callable[..., Path], sources: str, files: dict[str, str]) -> tuple[Path, Worker]:
    tree = {
        "tenants/acme/TENANT.json": '{"tenant_id": "acme", "trust_level": 2}',
        "tenants/acme/workers/desk/PERSONA.md": PERSONA.format(sources=sources),
        **{f"tenants/acme/workers/desk/{rel}": text for rel, text in files.items()},
    }
    root = write_tree(tree)
    registry = WorkspaceRegistry(root, product_skills=None)
    registry.load_all()
    worker = registry.worker("acme", "desk")
    assert worker is not None
    return root, worker


def texts(found: list[object]) -> list[tuple[str, str]]:
    return [(item.text, item.source) for item in found]  # type: ignore[attr-defined]


def test_the_passages_sharing_most_words_with_the_message_come_first(write_tree: Callable[..., Path]) -> None:
    root, worker = load(
        write_tree,
        "    - {type: folder, path: knowledge}\n    - policies/refunds.md",
        {
            "knowledge/faq.md": FAQ,
            "knowledge/notes.txt": "Sign-in problems: clear the browser cache first.",
            "knowledge/image.png": "password reset password reset",  # not a text file
            "policies/refunds.md": "Refunds over 100 EUR need a manager.",
            "private/secrets.md": "password reset master key: hunter2",  # not a knowledge source
        },
    )
    search = KnowledgeSearch(root)
    found = texts(search.search(worker, "How do I reset my password? I cannot sign in."))
    assert found[0] == (
        "[knowledge] Accounts: Password reset: use the 'Forgot password' link on the sign-in page.",
        "knowledge:knowledge/faq.md",
    )
    assert ("[knowledge] Sign-in problems: clear the browser cache first.", "knowledge:knowledge/notes.txt") in found
    assert all("hunter2" not in text and "Billing" not in text for text, _ in found)
    assert texts(search.search(worker, "a refund of 240 EUR")) == [
        ("[knowledge] Refunds over 100 EUR need a manager.", "knowledge:policies/refunds.md")
    ]
    assert search.search(worker, "the weather in Lisbon") == []


def test_an_edited_file_is_read_again(write_tree: Callable[..., Path]) -> None:
    root, worker = load(write_tree, "    - knowledge/faq.md", {"knowledge/faq.md": FAQ})
    search = KnowledgeSearch(root)
    assert search.search(worker, "invoices")
    path = root / "tenants/acme/workers/desk/knowledge/faq.md"
    path.write_text("Invoices now come on the 5th of each month, by email.\n", encoding="utf-8")
    [item] = search.search(worker, "when do invoices come")
    assert item.text == "[knowledge] Invoices now come on the 5th of each month, by email."


def test_nothing_outside_the_worker_folder_is_read(write_tree: Callable[..., Path], tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "leak.md").write_text("password reset secret from another worker", encoding="utf-8")
    root, worker = load(write_tree, "    - {type: folder, path: linked}", {})
    (root / "tenants/acme/workers/desk/linked").symlink_to(outside, target_is_directory=True)
    assert KnowledgeSearch(root).search(worker, "password reset") == []


def test_a_source_naming_nothing_searchable_is_noted_and_ignored(write_tree: Callable[..., Path]) -> None:
    sources = "    - wiki://support/faq\n    - {type: confluence, space: SUP}\n    - {type: folder, path: ../../other}"
    root, worker = load(write_tree, sources, {})
    doc = read_markdown(root / "tenants/acme/workers/desk/PERSONA.md", "PERSONA.md")
    _, issues = validate(PersonaSpec, doc)
    noted = sorted(i.field for i in issues if i.severity == "note" and "not searched" in i.message)
    assert noted == [f"service.knowledge_sources[{n}]" for n in range(3)]
    assert KnowledgeSearch(root).search(worker, "faq support") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("How do I reset my Password?", {"reset", "password"}),
        ("sign-in page", {"sign-in", "sign", "page"}),
        ("重置密码", {"重置", "置密", "密码"}),
        ("a to is", set()),
    ],
)
def test_terms(text: str, expected: set[str]) -> None:
    assert terms(text) == expected


def test_passages_keep_their_heading() -> None:
    assert passages("# A\n\none\n\ntwo\n\n## B\n\nthree") == ["A: one", "A: two", "B: three"]
