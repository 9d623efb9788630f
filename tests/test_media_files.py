"""`MEDIA:` files are read only from under the allowed roots, whatever is swapped in on the way."""

import os
import threading
import time
from pathlib import Path

import pytest

from pheby.files.media_files import MediaRefused, open_media_file

SECRET = b"the owner's secret"
PUBLIC = b"a public deliverable"


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 1024)
    finally:
        os.close(fd)


def test_a_directory_swapped_for_a_symlink_never_leads_outside_the_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "file.txt").write_bytes(PUBLIC)
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "file.txt").write_bytes(SECRET)
    real, link = root / "sub.real", root / "sub"
    stop = threading.Event()

    def swap() -> None:
        # `sub` is a real directory, then a symlink to the outside one, then the directory again, over and over.
        while not stop.is_set():
            os.rename(link, real)
            os.symlink(outside / "sub", link)
            time.sleep(0.0001)  # hand the GIL over in each state, so the copies run into both
            os.unlink(link)
            os.rename(real, link)
            time.sleep(0.0001)

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    read: list[bytes] = []
    refused = 0
    try:
        for _ in range(10000):
            try:
                fd, _size = open_media_file(str(root / "sub" / "file.txt"), [root], 1024)
            except (MediaRefused, OSError):
                refused += 1
                continue
            read.append(_read(fd))
    finally:
        stop.set()
        swapper.join(timeout=10)
    assert SECRET not in read
    assert set(read) <= {PUBLIC}
    assert read, "the swap never let a copy through at all: the test proves nothing"
    assert refused, "the swap never got in the way: the test proves nothing"


@pytest.mark.parametrize("relative", ["link/file.txt", "file-link.txt", "../outside/file.txt", "fifo"])
def test_links_and_non_files_under_the_root_are_refused(tmp_path: Path, relative: str) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "file.txt").write_bytes(SECRET)
    (root / "link").symlink_to(outside)
    (root / "file-link.txt").symlink_to(outside / "file.txt")
    os.mkfifo(root / "fifo")
    with pytest.raises(MediaRefused):
        open_media_file(f"{root}/{relative}", [root], 1024)


def test_a_root_given_through_a_link_of_the_operators_is_allowed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "d").mkdir(parents=True)
    (real / "d" / "f.txt").write_bytes(PUBLIC)
    (tmp_path / "alias").symlink_to(real)
    for path in (tmp_path / "alias" / "d" / "f.txt", real / "d" / "f.txt"):
        fd, size = open_media_file(str(path), [tmp_path / "alias"], 1024)
        assert (_read(fd), size) == (PUBLIC, len(PUBLIC))
