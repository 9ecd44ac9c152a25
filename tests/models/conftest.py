"""Fixtures of the models tier: two real vLLMs behind one app."""

from __future__ import annotations

import shutil

import pytest

from tests.support.models import REPLY_TOKENS, serve_two_models


@pytest.fixture(scope="module")
def two_models(demo_model, tmp_path_factory):
    """A: the demo model; B: a copy of its folder, so served under another name."""
    tmp = tmp_path_factory.mktemp("two-models")
    yield from serve_two_models(demo_model, shutil.copytree(demo_model, tmp / "demo-copy"), tmp,
                                max_tokens=REPLY_TOKENS)
