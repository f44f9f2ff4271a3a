from pathlib import Path

import pytest

from genworker import ids
from genworker.ids import InvalidIdError, PathEscapeError, PlainFolders, is_inside, safe_join, validate_id


@pytest.mark.parametrize("value", ["a", "acme", "worker-1", "A_b.c", "7", "x" * 128, "v1.2.3"])
def test_validate_id_accepts_plain_ids(value: str) -> None:
    assert validate_id(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "..",
        ".",
        "../x",
        "x/..",
        "a..b",
        "/abs",
        "a/b",
        "a\\b",
        "a\x00b",
        "\x00",
        ".hidden",
        "-flag",
        "_x",
        "a b",
        "a\n",
        "é",
        "x" * 129,
        "C:x",
    ],
)
def test_validate_id_refuses_unsafe_values(value: str) -> None:
    with pytest.raises(InvalidIdError, match="not a valid id"):
        validate_id(value)


@pytest.mark.parametrize("value", [None, 1, b"a", ["a"]])
def test_validate_id_refuses_non_strings(value: object) -> None:
    with pytest.raises(InvalidIdError, match="must be a string"):
        validate_id(value, "worker id")


def test_validate_id_message_names_kind_and_value() -> None:
    with pytest.raises(InvalidIdError, match=r"worker id '\.\./x' is not a valid id"):
        validate_id("../x", "worker id")


def test_errors_are_value_errors() -> None:
    assert issubclass(InvalidIdError, ValueError)
    assert issubclass(PathEscapeError, ValueError)


def test_safe_join_joins_validated_ids(tmp_path: Path) -> None:
    assert safe_join(tmp_path, "acme", "workers", "w") == tmp_path / "acme" / "workers" / "w"
    assert safe_join(tmp_path) == tmp_path


@pytest.mark.parametrize("part", ["..", "../x", "/etc", "a/b", "a\x00", ""])
def test_safe_join_refuses_unsafe_parts(tmp_path: Path, part: str) -> None:
    with pytest.raises(InvalidIdError):
        safe_join(tmp_path, "ok", part, kind="session id")


def test_safe_join_refuses_symlink_out_of_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathEscapeError, match="outside"):
        safe_join(root, "link")
    with pytest.raises(PathEscapeError):
        safe_join(root, "link", "deeper")


def test_safe_join_refuses_a_deeper_symlink_out_of_root_and_a_linked_root_is_fine(tmp_path: Path) -> None:
    real_root, outside = tmp_path / "real", tmp_path / "outside"
    (real_root / "t").mkdir(parents=True)
    outside.mkdir()
    (real_root / "t" / "escape").symlink_to(outside, target_is_directory=True)
    (tmp_path / "root").symlink_to(real_root, target_is_directory=True)  # the root itself may be a link
    assert safe_join(tmp_path / "root", "t", "x") == tmp_path / "root" / "t" / "x"
    with pytest.raises(PathEscapeError):
        safe_join(tmp_path / "root", "t", "escape", "file")


def test_safe_join_accepts_symlink_that_stays_inside(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
    assert safe_join(tmp_path, "alias", "x") == tmp_path / "alias" / "x"


def test_is_inside(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    assert is_inside(root, root)
    assert is_inside(root, root / "a" / "b")  # need not exist
    assert not is_inside(root, tmp_path)
    assert not is_inside(root, root / ".." / "other")
    # a sibling whose name merely starts with the root's name is not inside
    (tmp_path / "root2").mkdir()
    assert not is_inside(root, tmp_path / "root2" / "x")


def test_is_inside_follows_symlinks(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "out").symlink_to(outside, target_is_directory=True)
    (root / "file").symlink_to(outside / "secret.txt")
    assert not is_inside(root, root / "out")
    assert not is_inside(root, root / "file")
    # the root itself may be reached through a symlink
    (tmp_path / "root-link").symlink_to(root, target_is_directory=True)
    assert is_inside(tmp_path / "root-link", root / "a")
    # a link deep below the root, or one that stays inside, is still resolved
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "out").symlink_to(outside, target_is_directory=True)
    assert not is_inside(root, root / "a" / "b" / "out" / "x.json")
    (root / "a" / "in").symlink_to(root / "a" / "b", target_is_directory=True)
    assert is_inside(root, root / "a" / "in" / "x.json")


def test_symlink_loops_are_not_inside_and_cannot_be_joined(tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert not is_inside(tmp_path, tmp_path / "loop")
    assert not is_inside(tmp_path, tmp_path / "a" / "x")
    with pytest.raises(PathEscapeError):
        safe_join(tmp_path, "loop")


def test_plain_folders_check_a_folder_once_and_the_file_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "runs").mkdir(parents=True)
    outside.mkdir()
    folders = PlainFolders()
    assert folders.file(root, root / "runs", "a.json") == root / "runs" / "a.json"
    walks: list[Path] = []
    real = ids.plainly_under
    monkeypatch.setattr(ids, "plainly_under", lambda r, p: (walks.append(p), real(r, p))[1])
    assert folders.file(root, root / "runs", "b.json") == root / "runs" / "b.json"
    assert walks == []  # the folder is known: no walk from the root
    (root / "runs" / "c.json").symlink_to(outside / "secret.json")
    with pytest.raises(PathEscapeError):
        folders.file(root, root / "runs", "c.json")  # the file itself is still checked
    (root / "runs" / "d.json").symlink_to(root / "runs" / "b.json")
    assert folders.file(root, root / "runs", "d.json") == root / "runs" / "d.json"  # inside: followed


def test_plain_folders_never_remember_a_symlinked_or_missing_folder(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "sessions").symlink_to(outside, target_is_directory=True)
    folders = PlainFolders()
    for _ in range(2):
        with pytest.raises(PathEscapeError):
            folders.file(root, root / "sessions", "s.json")
    folders.file(root, root / "later", "x.json")  # not there yet: checked again next time
    (root / "later").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathEscapeError):
        folders.file(root, root / "later", "x.json")
