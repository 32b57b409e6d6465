"""stepstone writes Git objects itself: they must be byte for byte what git writes."""

import os
import subprocess
import threading
from pathlib import Path

import pygit2
from hypothesis import given, settings
from hypothesis import strategies as st

from stepstone import gitobjects
from stepstone.gitobjects import BLOB_MODE, TREE_MODE, ObjectWriter

names = st.text(alphabet=st.sampled_from("ab.-_/0"), min_size=1, max_size=4).filter(
    lambda n: "/" not in n and n not in (".", "..")
)


def _writer(repo: pygit2.Repository) -> ObjectWriter:
    return ObjectWriter(Path(repo.path), lambda oid: bytes(repo.odb.read(pygit2.Oid(raw=oid))[1]))


@settings(max_examples=60, deadline=None)
@given(entries=st.dictionaries(names, st.booleans(), min_size=1, max_size=12))
def test_a_tree_has_the_id_libgit2_gives_it(tmp_path_factory, entries: dict[str, bool]):
    repo = pygit2.init_repository(tmp_path_factory.mktemp("repo"), bare=True)
    writer = _writer(repo)
    blob = writer.write(b"blob", b"content\n")
    empty = writer.write_tree(gitobjects.Tree())
    builder = repo.TreeBuilder()
    ours = gitobjects.Tree()
    for name, is_tree in entries.items():
        oid, mode = (empty, TREE_MODE) if is_tree else (blob, BLOB_MODE)
        ours.set(name.encode(), mode, oid)
        builder.insert(
            name,
            pygit2.Oid(raw=oid),
            pygit2.enums.FileMode.TREE if is_tree else pygit2.enums.FileMode.BLOB,
        )
    written = writer.write_tree(ours)
    assert written.hex() == str(builder.write())
    assert gitobjects.Tree.parse(ours.format()).format() == ours.format()


def test_objects_are_readable_by_libgit2_and_pass_git_fsck(tmp_path: Path):
    repo = pygit2.init_repository(tmp_path / "repo", bare=True)
    writer = _writer(repo)
    blob = writer.write(b"blob", b'{"step": 1}\n')
    tree = writer.apply(None, {(b"steps", b"ab", b"one.json"): blob, (b"run.json",): blob})
    assert tree is not None
    changed = writer.apply(tree, {(b"steps", b"ab", b"one.json"): None})
    assert changed is not None
    commit = writer.write(
        b"commit",
        gitobjects.format_commit(changed.hex(), [], "A <person>", "a@example.org", "msg\n"),
    )
    repo.references.create("refs/heads/main", pygit2.Oid(raw=commit))
    read = repo[pygit2.Oid(raw=commit)]
    assert isinstance(read, pygit2.Commit)
    assert read.author.name == "A person"
    assert [e.name for e in read.tree] == ["run.json"]  # the emptied folders are gone
    assert (read.tree / "run.json").data == b'{"step": 1}\n'
    done = subprocess.run(
        ["git", "fsck", "--strict"], cwd=repo.path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_a_tmp_file_left_by_a_killed_writer_does_not_block_the_next(tmp_path: Path):
    repo = pygit2.init_repository(tmp_path / "repo", bare=True)
    writer = _writer(repo)
    oid = writer.write(b"blob", b"x")
    folder = Path(repo.path) / "objects" / oid.hex()[:2]
    stale = folder / f"tmp_obj_stepstone_{os.getpid()}_{threading.get_ident()}"
    stale.write_bytes(b"torn")
    stale.chmod(0o444)
    assert writer.write(b"blob", b"x") == oid
    assert not stale.exists()
    assert repo[pygit2.Oid(raw=oid)].data == b"x"


def test_a_file_replaced_by_a_folder_of_the_same_name_leaves_one_entry():
    tree = gitobjects.Tree()
    tree.set(b"a", BLOB_MODE, b"\1" * 20)
    tree.set(b"a.b", BLOB_MODE, b"\2" * 20)
    tree.set(b"a", TREE_MODE, b"\3" * 20)
    assert len(tree) == 2
    assert tree.get(b"a") == (TREE_MODE, b"\3" * 20)
    assert tree.order == [b"a.b", b"a/"]  # git's order: "a/" sorts after "a.b"
    tree.remove(b"a")
    assert tree.get(b"a") is None and len(tree) == 1
