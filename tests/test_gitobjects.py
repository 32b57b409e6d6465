"""stepstone writes Git objects and packs itself: git must read them as its own."""

import hashlib
import os
import threading
from pathlib import Path

import pygit2
from conftest import git
from hypothesis import given, settings
from hypothesis import strategies as st

from stepstone.store import gitobjects, packs
from stepstone.store.gitobjects import BLOB_MODE, TREE_MODE, ObjectWriter
from stepstone.store.packs import read_index

names = st.text(alphabet=st.sampled_from("ab.-_/0"), min_size=1, max_size=4).filter(
    lambda n: "/" not in n and n not in (".", "..")
)


def _writer(repo: pygit2.Repository, **options: object) -> ObjectWriter:
    writer = ObjectWriter(
        Path(repo.path),
        lambda oid: bytes(repo.odb.read(pygit2.Oid(raw=oid))[1]),
        holds=lambda oid: pygit2.Oid(raw=oid) in repo.odb,
    )
    for key, value in options.items():
        setattr(writer.packs, key, value)
    return writer


@settings(max_examples=60, deadline=None)
@given(entries=st.dictionaries(names, st.booleans(), min_size=1, max_size=12))
def test_a_tree_has_the_id_libgit2_gives_it(tmp_path_factory, entries: dict[str, bool]):
    repo = pygit2.init_repository(tmp_path_factory.mktemp("repo"), bare=True)
    writer = _writer(repo)
    blob = writer.write(b"blob", b"content\n")
    empty = writer.write_tree(gitobjects.Tree())
    writer.finish()
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


def _commit(writer: ObjectWriter, files: dict[bytes, bytes], parents: list[str]) -> str:
    updates = {(b"steps", b"ab", name): writer.write(b"blob", data) for name, data in files.items()}
    tree = writer.apply(None, {**updates, (b"run.json",): writer.write(b"blob", b"{}")})
    assert tree is not None
    commit = writer.write(
        b"commit", gitobjects.format_commit(tree.hex(), parents, "A <person>", "a@b", "msg\n")
    )
    writer.finish()
    return commit.hex()


def test_a_commit_written_as_a_pack_is_read_by_libgit2_and_passes_git_fsck(tmp_path: Path):
    repo = pygit2.init_repository(tmp_path / "repo", bare=True)
    writer = _writer(repo)
    commit = _commit(writer, {b"one.json": b'{"step": 1}\n'}, [])
    repo.references.create("refs/heads/main", pygit2.Oid(hex=commit))
    read = repo[pygit2.Oid(hex=commit)]
    assert isinstance(read, pygit2.Commit)
    assert read.author.name == "A person"
    assert (read.tree / "steps/ab/one.json").data == b'{"step": 1}\n'
    assert list((Path(repo.path) / "objects" / "pack").glob("*.pack"))
    git("fsck", "--strict", cwd=repo.path)
    git("verify-pack", *map(str, (Path(repo.path) / "objects/pack").glob("*.idx")), cwd=repo.path)


def test_small_and_large_objects_are_compressed_so_git_reads_them(tmp_path: Path):
    # small objects get a small zlib window and state, large ones zlib's defaults
    repo = pygit2.init_repository(tmp_path / "repo", bare=True)
    writer = _writer(repo)
    small, large = b'{"step": 1}\n', os.urandom(24 << 10).hex().encode()  # 48 KB
    middle = b"".join(b'"row %d": %d,\n' % (i, i * i) for i in range(300))  # 5 KB
    blobs = {b"small.json": small, b"middle.json": middle, b"large.bin": large}
    commit = _commit(writer, blobs, [])
    repo.references.create("refs/heads/main", pygit2.Oid(hex=commit))
    for name, data in blobs.items():
        path = f"steps/ab/{name.decode()}"
        assert git("cat-file", "blob", f"main:{path}", cwd=repo.path).encode() == data
    git("fsck", "--strict", cwd=repo.path)
    git("verify-pack", *map(str, (Path(repo.path) / "objects/pack").glob("*.idx")), cwd=repo.path)


def test_small_packs_are_merged_and_every_object_stays_readable(tmp_path: Path):
    repo = pygit2.init_repository(tmp_path / "repo", bare=True)
    writer = _writer(repo, pack_limit=4)
    parents: list[str] = []
    for i in range(40):
        parents = [_commit(writer, {f"{i}.json".encode(): f"{i}\n".encode()}, parents)]
        writer.packs.merge_if_needed(lambda: None)
    repo.references.create("refs/heads/main", pygit2.Oid(hex=parents[0]))
    pack_files = list((Path(repo.path) / "objects" / "pack").glob("*.pack"))
    assert len(pack_files) <= 4 + 6  # the limit, plus about log2(40 commits)
    assert int(git("rev-list", "--count", "main", cwd=repo.path)) == 40
    git("fsck", "--strict", cwd=repo.path)
    git("verify-pack", *map(str, (Path(repo.path) / "objects/pack").glob("*.idx")), cwd=repo.path)
    history = list(repo.walk(repo.revparse_single("main").id))
    for i, commit in enumerate(reversed(history)):
        assert (commit.tree / f"steps/ab/{i}.json").data == f"{i}\n".encode()


def test_geometric_prefix_keeps_each_pack_twice_all_smaller_ones():
    assert packs.geometric_prefix({"a": 5, "b": 5, "c": 40}) == ["a", "b"]
    assert packs.geometric_prefix({"a": 5, "b": 10, "c": 40}) == []
    assert packs.geometric_prefix({"a": 5, "b": 5, "c": 12}) == ["a", "b", "c"]


def test_a_pack_with_deltas_made_by_git_is_left_alone(tmp_path: Path):
    repo = pygit2.init_repository(tmp_path / "repo", bare=True)
    writer = _writer(repo, pack_limit=1)
    parents: list[str] = []
    body = "".join(f"line {n}\n" for n in range(200))
    for i in range(3):
        parents = [_commit(writer, {b"big.json": (body + str(i)).encode()}, parents)]
    repo.references.create("refs/heads/main", pygit2.Oid(hex=parents[0]))
    git("repack", "-a", "-d", "-q", "--no-write-bitmap-index", cwd=repo.path)  # deltas, one pack
    for i in range(3, 6):
        parents = [_commit(writer, {b"big.json": (body + str(i)).encode()}, parents)]
        writer.packs.merge_if_needed(lambda: None)
    repo.references["refs/heads/main"].set_target(pygit2.Oid(hex=parents[0]))
    git("fsck", "--strict", cwd=repo.path)


def test_a_tmp_file_left_by_a_killed_writer_does_not_block_the_next(tmp_path: Path):
    repo = pygit2.init_repository(tmp_path / "repo", bare=True)
    folder = Path(repo.path) / "objects" / "pack"
    folder.mkdir(exist_ok=True)
    stale = folder / f"tmp_pack_stepstone_{os.getpid()}_{threading.get_ident()}"
    stale.write_bytes(b"torn")
    stale.chmod(0o444)
    writer = _writer(repo)
    oid = writer.write(b"blob", b"x")
    writer.finish()
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


def test_a_commit_writes_no_copy_of_a_tree_or_blob_it_leaves_as_stored(tmp_path: Path):
    repo = pygit2.init_repository(tmp_path / "repo", bare=True)
    writer = _writer(repo)
    kept = writer.write(b"blob", b"kept\n")
    first = writer.apply(None, {(b"steps", b"ab", b"a.json"): kept, (b"run.json",): kept})
    assert first is not None
    writer.finish()
    pack_dir = Path(repo.path) / "objects" / "pack"
    before = set(pack_dir.glob("*.idx"))
    again = writer.write(b"blob", b"kept\n")  # the same value saved again, at the same path
    new = writer.write(b"blob", b"new\n")
    second = writer.apply(first, {(b"steps", b"ab", b"a.json"): again, (b"other", b"b.json"): new})
    assert second is not None
    writer.finish()
    (index,) = set(pack_dir.glob("*.idx")) - before
    written = {oid for oid, _, _ in read_index(index.read_bytes())}
    tree = repo.get(pygit2.Oid(raw=second))
    steps = tree["steps"]
    assert written == {second, new, tree["other"].id.raw}
    assert {kept, steps.id.raw, steps["ab"].id.raw}.isdisjoint(written)
    assert (tree / "steps/ab/a.json").data == b"kept\n"
    git("fsck", "--strict", cwd=repo.path)


def test_a_value_saved_again_is_written_again_when_the_store_lost_it(tmp_path: Path):
    # a run repaired back to a commit whose saved value was lost: its tree names the
    # blob, the store does not have it, and saving the value again must put it back
    repo = pygit2.init_repository(tmp_path / "repo", bare=True)
    content = b"saved value\n"
    missing = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    base = git("mktree", "--missing", cwd=repo.path, input=f"100644 blob {missing}\tv\n").strip()
    writer = _writer(repo)
    blob = writer.write(b"blob", content)
    tree = writer.apply(bytes.fromhex(base), {(b"v",): blob})
    writer.finish()
    assert tree is not None and tree.hex() == base  # the tree itself is as stored
    assert repo.odb.read(pygit2.Oid(hex=missing))[1] == content
