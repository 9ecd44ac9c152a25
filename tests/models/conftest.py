"""Fixtures of the models tier: two real vLLMs, started once for the tier, each module's app on them."""

from __future__ import annotations

import shutil

import pytest

from server.paths import ROOT
from server.stack import provision
from tests.support.models import REPLY_TOKENS, app_on, two_engines


@pytest.fixture(scope="package")
def model_pair(demo_model, engine_python, tmp_path_factory):
    """A: the demo model (4096 tokens); B: demo-small, the other built-in model (1024 tokens),
    from a copy of its folder named so that neither name is the start of the other (the
    browser tests pick a model by its name).  Each module reads them through an app of its
    own, and counts their requests as differences."""
    small = provision.ensure_demo_model(ROOT / ".cache" / "demo-model-small", engine_python, ROOT, size="small")
    tmp = tmp_path_factory.mktemp("model-pair")
    yield from two_engines(demo_model, shutil.copytree(small, tmp / "small-model"), tmp)


@pytest.fixture(scope="module")
def two_models(model_pair, tmp_path_factory):
    """The chat on both models, with replies of REPLY_TOKENS."""
    yield from app_on(model_pair, tmp_path_factory.mktemp("two-models"), max_tokens=REPLY_TOKENS)
