"""Caps on the uploads a chat and a user hold, and the disk's free-space floor (the route that
applies them is attacked in tests/app/test_attached_files.py)."""

from __future__ import annotations

import shutil

import pytest

from app.web.upload_caps import MIB, Caps, Held, UploadRefused, Uploads, refusal

CAPS = Caps(files_per_chat=3, bytes_per_chat=10 * MIB, files_per_user=5, bytes_per_user=16 * MIB,
            disk_free_bytes=0)


def why(held, size=MIB, chat="c1", user="u1", caps=CAPS, free=10**12):
    refused = refusal(caps, held, chat, user, size, free)
    return refused and (refused.status, refused.reason, refused.values)


def test_a_chat_holds_its_cap_of_files_and_of_bytes():
    assert why([Held("c1", "u1", MIB)] * 2) is None
    assert why([Held("c1", "u1", MIB)] * 3) == (413, "upload_chat_files", {"limit": 3})
    assert why([Held("c1", "u1", 9 * MIB)]) is None
    assert why([Held("c1", "u1", 9 * MIB)], size=MIB + 1) == (413, "upload_chat_mb", {"limit_mb": 10})


def test_a_users_chats_together_hold_the_users_cap():
    held = [Held(f"c{i}", "u1", 3 * MIB) for i in range(2, 7)]
    assert why(held[:4]) is None
    assert why(held) == (413, "upload_user_files", {"limit": 5})
    assert why(held[:4], size=4 * MIB + 1) == (413, "upload_user_mb", {"limit_mb": 16})


def test_a_cap_of_zero_is_off():
    off = Caps(0, 0, 0, 0, 0)
    assert why([Held("c1", "u1", 100 * MIB)] * 100, caps=off) is None


def test_uploads_sent_at_once_are_counted_before_any_is_written(tmp_path):
    uploads = Uploads(CAPS, lambda: 10**12)
    keys = [uploads.reserve("c1", "u1", MIB) for _ in range(3)]
    with pytest.raises(UploadRefused) as refused:
        uploads.reserve("c1", "u1", MIB)
    assert refused.value.reason == "upload_chat_files"
    uploads.written(keys[0], None)  # Chainlit failed to write it: it holds nothing
    uploads.written(keys[1], tmp_path / "kept.txt")
    (tmp_path / "kept.txt").write_bytes(b"x")
    uploads.reserve("c1", "u1", MIB)
    with pytest.raises(UploadRefused):
        uploads.reserve("c1", "u1", MIB)


def test_a_file_gone_from_disk_no_longer_counts(tmp_path):
    uploads = Uploads(CAPS, lambda: 10**12)
    for i in range(3):
        (tmp_path / f"{i}.txt").write_bytes(b"x")
        uploads.written(uploads.reserve("c1", "u1", MIB), tmp_path / f"{i}.txt")
    (tmp_path / "0.txt").unlink()  # read into a message (or its chat ended)
    uploads.reserve("c1", "u1", MIB)


def test_the_forgotten_uploads_are_swept_as_their_count_grows(tmp_path):
    uploads = Uploads(Caps(0, 0, 0, 0, 0), lambda: 10**12)
    (tmp_path / "kept.txt").write_bytes(b"x")
    uploads.written(uploads.reserve("c0", "u0", 1), tmp_path / "kept.txt")
    for i in range(1000):
        uploads.written(uploads.reserve(f"c{i}", f"u{i}", 1), tmp_path / "read-and-deleted.txt")
    assert len(uploads.held) < 2 * 256 and any(h.on_disk() for h in uploads.held.values())


def test_uploads_stop_at_the_disks_floor(tmp_path):
    floor = Caps(0, 0, 0, 0, disk_free_bytes=100 * MIB)
    assert why([], size=10 * MIB, caps=floor, free=110 * MIB) is None
    assert why([], size=10 * MIB + 1, caps=floor, free=110 * MIB) == (507, "upload_disk_full", {"floor_mb": 100})
    # On the real disk: a floor above its size refuses every upload.
    whole_disk = Caps(0, 0, 0, 0, disk_free_bytes=shutil.disk_usage(tmp_path).total + 1)
    with pytest.raises(UploadRefused):
        Uploads(whole_disk, lambda: shutil.disk_usage(tmp_path).free).reserve("c1", "u1", 1)
