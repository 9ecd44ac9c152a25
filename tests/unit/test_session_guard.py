"""Which session ids app/web/session_guard.py lets through, and where their folders may be."""

from __future__ import annotations

import uuid


from app.web.session_guard import contained_dir, valid_session_id


def test_only_uuids_are_session_ids_and_folders_stay_inside(tmp_path):
    assert valid_session_id(str(uuid.uuid4()))
    for bad in ("../../x", "/etc", "", "a" * 36, f"{uuid.uuid4()}/..", None, 7):
        assert not valid_session_id(bad)
    for bad in ("../../x", "/etc", "..", "x/../../y"):
        assert contained_dir(tmp_path, bad).parent == tmp_path
    good = str(uuid.uuid4())
    assert contained_dir(tmp_path, good) == tmp_path / good
