"""Submission ids (``tether.schedulers.ids``): every backend's rule, and TorchX's helpers."""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.schedulers.aws_batch.render import JOB_NAME_RULE as AWS_BATCH
from tether.schedulers.aws_sagemaker.render import JOB_NAME_RULE as SAGEMAKER
from tether.schedulers.gcp_batch.render import JOB_ID_RULE as GCP_BATCH
from tether.schedulers.ids import (
    DEFAULT_RULE,
    AppIdRule,
    make_app_id,
    make_unique,
    random_id,
    random_string,
    random_uint64,
)
from tether.schedulers.kubernetes.naming import APP_NAME_RULE as KUBERNETES
from tether.schedulers.local_docker.render import APP_ID_RULE as LOCAL_DOCKER

DNS_1035 = r"[a-z]([-a-z0-9]*[a-z0-9])?"
# each backend's rule and the name its backend accepts (from the backend's documentation)
ACCEPTED: dict[str, tuple[AppIdRule, str, int]] = {
    "local/lsf/ray": (DEFAULT_RULE, r"[a-z0-9]+(-[a-z0-9]+)*", 49),
    "gcp_batch": (GCP_BATCH, r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?", 63),
    "aws_batch": (AWS_BATCH, r"[A-Za-z0-9][A-Za-z0-9_-]*", 128),
    "aws_sagemaker": (SAGEMAKER, r"[a-zA-Z0-9](-*[a-zA-Z0-9])*", 63),
    "kubernetes": (KUBERNETES, DNS_1035, 39),  # its Jobs and Service append to it within 63
    "local_docker": (LOCAL_DOCKER, DNS_1035, 37),  # a hostname label, with room for a role
}

NAMES = st.text(st.characters(codec="utf-8"), max_size=200) | st.from_regex(
    r"[A-Za-z0-9 _.!-]{0,120}", fullmatch=True)


@pytest.mark.parametrize("backend", sorted(ACCEPTED))
@settings(max_examples=300, deadline=None)
@given(name=NAMES)
def test_every_name_gives_an_id_the_backend_accepts(backend: str, name: str) -> None:
    rule, pattern, longest = ACCEPTED[backend]
    app_id = make_app_id(name, rule)
    assert re.fullmatch(pattern, app_id), app_id
    assert len(app_id) <= min(rule.max_len, longest)
    base, suffix = app_id.rsplit("-", 1)
    assert base == rule.base(name)  # the base depends on the name only
    assert re.fullmatch(f"[a-z0-9]{{{rule.suffix_len}}}", suffix)


@settings(max_examples=200, deadline=None)
@given(head=st.from_regex(r"[a-z]{40}", fullmatch=True), tail=st.text(min_size=1))
def test_a_long_name_is_cut_and_ends_in_its_own_hash(head: str, tail: str) -> None:
    """kubernetes and local_docker: long names that differ only past the cut stay distinct."""
    name = head + tail
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    for rule in (KUBERNETES, LOCAL_DOCKER):
        assert rule.base(name) == f"{head[: rule.max_base - 7]}-{digest}"


@pytest.mark.parametrize(("rule", "name", "base"), [
    (DEFAULT_RULE, "My Train!", "my-train"),
    (DEFAULT_RULE, "!!!", "app"),
    (DEFAULT_RULE, "x" * 60, "x" * 40),
    (GCP_BATCH, "7b model", "app-7b-model"),
    (AWS_BATCH, "My_Train run", "My_Train-run"),
    (SAGEMAKER, "My_Train", "My-Train"),
    (KUBERNETES, "123-train", "t-123-train"),
    (KUBERNETES, "!!!", "t"),
    (LOCAL_DOCKER, "", "x"),
    (LOCAL_DOCKER, "9 lives", "t-9-lives"),
    (LOCAL_DOCKER, "DDP  Train!", "ddp-train"),
])
def test_each_backend_keeps_its_naming(rule: AppIdRule, name: str, base: str) -> None:
    assert rule.base(name) == base
    assert make_app_id(name, rule, "pinned") == f"{base}-pinned"


def test_suffixes_are_fresh_and_use_the_whole_alphabet() -> None:
    ids = {make_app_id("train") for _ in range(200)}
    assert len(ids) == 200
    assert set("".join(random_string(2000))) == set("abcdefghijklmnopqrstuvwxyz0123456789")
    assert random_string(0) == ""


def test_random_uint64_covers_64_bits() -> None:
    values = [random_uint64() for _ in range(64)]
    assert all(0 <= v < 2**64 for v in values)
    assert len(set(values)) == 64
    assert any(v >= 2**63 for v in values)  # the top bit is used (fails with p = 2**-64)


@settings(max_examples=200, deadline=None)
@given(name=st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
       length=st.integers(min_value=0, max_value=30))
def test_make_unique_appends_a_kubernetes_safe_suffix(name: str, length: int) -> None:
    out = make_unique(name, string_length=length)
    assert out.startswith(name + "-")
    suffix = out[len(name) + 1:]
    assert re.fullmatch(r"[bcdfghj-np-tv-xz][bcdfghj-np-tv-xz0-9]*", suffix), suffix
    if length:
        assert len(suffix) == length
    else:
        assert 1 <= len(suffix) <= 14


def test_random_id_is_a_dns_label_without_vowels() -> None:
    ids = [random_id() for _ in range(500)]
    assert all(re.fullmatch(DNS_1035, i) and len(i) <= 14 for i in ids)
    assert not any(set(i) & set("aeiouy") for i in ids)
    assert len(set(ids)) == 500
