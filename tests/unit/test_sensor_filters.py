"""The typed `filter` of each sensor type: what passes, and misconfigurations named by sensor and field."""

from __future__ import annotations

from typing import Any

import pytest

from genworker.autonomy.sensing.errors import SensorConfigError
from genworker.autonomy.sensing.filters import (
    EmailFilter,
    FeishuFolderFilter,
    GitFilter,
    WebhookFilter,
    WorkspaceFileFilter,
    filter_issues,
    glob_matches,
    parse_filter,
    unknown_filter_keys,
)
from genworker.workspace.models.persona import SensorConfig


def parsed(source_type: str, **filter: Any) -> Any:
    return parse_filter(SensorConfig.model_validate({"source_type": source_type, "filter": filter}))


def test_globs_match_the_path_or_the_name() -> None:
    assert glob_matches("notes/a.md", "*.md")
    assert glob_matches("notes/a.md", "notes/*")
    assert glob_matches("notes/deep/a.md", "notes/*")  # `*` crosses folders, like fnmatch
    assert not glob_matches("notes/a.md", "other/*")
    assert not glob_matches("a.MD", "*.md")  # case-sensitive


def test_workspace_file_filter() -> None:
    flt = parsed("workspace_file", path="inbox/", include="*.csv", exclude=["tmp/*"])
    assert isinstance(flt, WorkspaceFileFilter)
    assert flt.path == "inbox" and flt.include == ("*.csv",)
    assert flt.passes({"path": "2024/q1.csv"})
    assert not flt.passes({"path": "tmp/q1.csv"})
    assert not flt.passes({"path": "q1.xlsx"})
    assert parsed("workspace_file").path == "."


def test_git_filter() -> None:
    flt = parsed("git", repo="repos/app", branches=["main", "release/*"], tags=False)
    assert isinstance(flt, GitFilter)
    assert flt.passes({"branch": "release/1.2"})
    assert not flt.passes({"branch": "feature/x"})
    assert not flt.passes({"tag": "v1"})
    assert parsed("git", repo="r").passes({"tag": "v1", "branch": "anything"})


def test_email_filter() -> None:
    flt = parsed("email", **{"from": ["@acme.example"], "subject_contains": "invoice"})
    assert isinstance(flt, EmailFilter)
    assert flt.passes({"from": "Bob <BOB@ACME.example>", "subject": "Your Invoice"})
    assert not flt.passes({"from": "eve@evil.example", "subject": "invoice"})
    assert not flt.passes({"from": "bob@acme.example", "subject": "hello"})
    assert not flt.passes({"subject": "invoice"})  # no From at all
    assert parsed("email").passes({})


def test_aliases_used_by_existing_workspaces() -> None:
    files = parsed("workspace_file", paths=["notes/board/*.md"])
    assert files.include == ("notes/board/*.md",) and files.passes({"path": "notes/board/q1.md"})
    git = parsed("git", repo="r", branch="main", paths=["models/**"])
    assert git.branches == ("main",) and git.paths == ("models/**",)
    assert parsed("email", folders=["INBOX", "Support"]).folders == ("INBOX", "Support")
    assert parsed("email", mailbox="Orders").folders == ("Orders",)
    mail = parsed("email", exclude_senders=["noreply@*", "notifications@*"])
    assert not mail.passes({"sender": "noreply@github.com"})
    assert mail.passes({"sender": "dana@acme.example"})


def test_upstream_filter_keys_as_comma_separated_strings() -> None:
    files = parsed("workspace_file", watch_paths="data/inbox, data/exports/", patterns="*.csv, *.xlsx")
    assert files.folders == ("data/inbox", "data/exports") and files.include == ("*.csv", "*.xlsx")
    git = parsed("git", repo_path="repos/warehouse", branches="main, release/2026.04")
    assert (git.repo, git.branches) == ("repos/warehouse", ("main", "release/2026.04"))
    assert parsed("git").repo == "."  # upstream's default: the worker folder itself
    mail = parsed("email", subject_keywords="data quality, SLA", from_domains="example.com", folder="Reports")
    assert (mail.subject_contains, mail.folders) == (("data quality", "SLA"), ("Reports",))
    assert mail.passes({"subject": "SLA breach", "sender": "ops@example.com"})
    assert mail.passes({"subject": "SLA breach", "sender": "ops@mail.example.com"})
    assert not mail.passes({"subject": "SLA breach", "sender": "ops@notexample.com"})
    assert not mail.passes({"subject": "SLA breach"})
    feishu = parsed("feishu_folder", folder_path="/Data Quality")
    assert isinstance(feishu, FeishuFolderFilter) and feishu.folder_path == "/Data Quality"


def test_unknown_filter_keys_are_ignored_and_named() -> None:
    # upstream ignores keys a sensor does not read; `genworker check` names them (filter_issues)
    config = SensorConfig.model_validate({"source_type": "email", "filter": {"label": "finance", "inclde": "x"}})
    assert parse_filter(config).folders == ("INBOX",)
    assert unknown_filter_keys(config) == ["label", "inclde"]
    assert unknown_filter_keys(SensorConfig.model_validate({"source_type": "git", "filter": {"repo_path": "r"}})) == []


def test_webhook_filter() -> None:
    flt = parsed("webhook", secret_env="WEBHOOK_SECRET_CI")
    assert isinstance(flt, WebhookFilter) and flt.secret_env == "WEBHOOK_SECRET_CI"


@pytest.mark.parametrize(
    ("source_type", "filter", "fragment"),
    [
        ("workspace_file", {"path": "../other"}, "filter.path"),
        ("workspace_file", {"path": "/etc"}, "filter.path"),
        ("git", {"repo": "r", "max_commits": 0}, "filter.max_commits"),
        ("email", {"mailbox": 'a"b'}, "filter.mailbox"),
        ("email", {"folders": ["INBOX", "INBOX"]}, "filter.folders"),
        ("email", {"folders": []}, "filter.folders"),
        ("email", {"security": "tls"}, "filter.security"),
        ("webhook", {"secret_env": "not a name"}, "filter.secret_env"),
        ("webhook", {"secret": "s3cret"}, "inline secrets are refused"),
    ],
)
def test_bad_filters_name_the_sensor_and_field(source_type: str, filter: dict[str, Any], fragment: str) -> None:
    with pytest.raises(SensorConfigError) as caught:
        parsed(source_type, **filter)
    assert fragment in str(caught.value)
    assert f"sensor {source_type!r}" in str(caught.value)


def test_filter_issues_name_ignored_keys_and_broken_filters_at_their_line(ws) -> None:
    ws.persona(
        extra="""
        monitor_configs:
          - source_type: email
            filter: {label: finance}
          - source_type: email
            filter:
              subject_keywords: invoice
              label: finance
          - source_type: git
            sensor_id: repo
            filter: {repo_path: ../outside}
          - source_type: fax
        """
    )
    worker, _ = ws.load_worker()
    issues = filter_issues(ws.root, worker)
    assert [(i.field, i.line) for i in issues] == [
        ("monitor_configs[1].filter.label", 11),  # the later email sensor replaced the first one
        ("monitor_configs[2].filter", 14),
    ]
    assert issues[0].message.startswith("ignored") and "will not run" in issues[1].message
