"""Run options: declaration, parsing of ``k=v`` strings, validation, StructuredOpts help."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from tether.specs import InvalidRunConfigException, StructuredOpts, runopts


@dataclass
class DemoOpts(StructuredOpts):
    namespace: str = "default"
    """Namespace to submit to."""
    queue: str | None = None
    """Queue   name,
    spread over lines."""
    retries: int = 2
    """How often."""
    ratio: float = 0.5
    """A fraction."""
    dry: bool = False
    """Skip things."""
    labels: dict[str, str] = field(default_factory=dict)
    """Extra labels."""
    hosts: list[str] = field(default_factory=list)
    """Hosts."""


@dataclass
class Required(StructuredOpts):
    cluster: str
    """Cluster to use."""


def test_structured_opts_help_from_docstrings() -> None:
    opts = DemoOpts.as_runopts()
    assert opts.get("namespace").help == "Namespace to submit to."  # type: ignore[union-attr]
    assert opts.get("queue").help == "Queue name, spread over lines."  # type: ignore[union-attr]
    assert opts.get("retries").default == 2  # type: ignore[union-attr]


def test_check_names_checks_names_only() -> None:
    """Only the names: values and required options are ``resolve``'s, so a wrong value and
    a missing required option pass, and an unknown name does not."""
    opts = Required.as_runopts() | DemoOpts.as_runopts()
    opts.check_names({"namespace": "x", "hosts": ["a"], "retries": "many"}, "demo")
    with pytest.raises(InvalidRunConfigException,
                       match=r"unknown run option 'namespce' for scheduler 'demo'; did you mean "
                             r"namespace\? \(allowed: cluster, namespace, "):  # fmt: skip
        opts.check_names({"namespce": "x"}, "demo")
    with pytest.raises(InvalidRunConfigException, match=r"names must be str, got int 3"):
        opts.check_names({3: "x"})  # type: ignore[dict-item]


def test_cfg_from_str_types() -> None:
    opts = DemoOpts.as_runopts()
    cfg = opts.cfg_from_str("retries=5,ratio=2,dry=yes,labels=a:1;b:2,hosts=h1;h2,queue=q")
    assert cfg == {
        "retries": 5, "ratio": 2.0, "dry": True, "labels": {"a": "1", "b": "2"},
        "hosts": ["h1", "h2"], "queue": "q",
    }
    # a comma-continued list
    assert opts.cfg_from_str("hosts=h1,h2,dry=0") == {"hosts": ["h1", "h2"], "dry": False}


def test_from_cfg_fills_defaults() -> None:
    o = DemoOpts.from_cfg({"retries": 1})
    assert (o.namespace, o.retries, o.labels) == ("default", 1, {})


@pytest.mark.parametrize(
    ("cfg", "needle"),
    [
        (
            {"namespce": "x"},
            "unknown run option 'namespce' for scheduler 'demo'; did you mean namespace?",
        ),
        ({"retries": "many"}, "cannot read 'many' as int"),
        ({"retries": 1.5}, "expects int, got float"),
        ({"hosts": "a"}, None),
    ],
)
def test_resolve_errors(cfg: dict[str, object], needle: str | None) -> None:
    opts = DemoOpts.as_runopts()
    if needle is None:
        assert opts.resolve(cfg, "demo")["hosts"] == ["a"]  # type: ignore[arg-type]
        return
    with pytest.raises(InvalidRunConfigException) as ei:
        opts.resolve(cfg, "demo")  # type: ignore[arg-type]
    assert needle in str(ei.value)


def test_required_option_missing() -> None:
    with pytest.raises(InvalidRunConfigException, match="required run option 'cluster'"):
        Required.from_cfg({}, "slurm")
    assert Required.from_cfg({"cluster": "c1"}).cluster == "c1"


def test_bad_items() -> None:
    opts = DemoOpts.as_runopts()
    with pytest.raises(InvalidRunConfigException, match="has no '='"):
        opts.cfg_from_str("retries")
    with pytest.raises(InvalidRunConfigException, match="write k1:v1;k2:v2"):
        opts.cfg_from_str("labels=novalue")
    with pytest.raises(InvalidRunConfigException, match="cannot read 'maybe' as bool"):
        opts.cfg_from_str("dry=maybe")


def test_declaration_errors() -> None:
    o = runopts()
    with pytest.raises(ValueError, match="required and cannot have a default"):
        o.add("x", str, "h", default="a", required=True)
    with pytest.raises(TypeError, match="is not a int"):
        o.add("y", int, "h", default="a")


def test_cfg_from_str_like_torchx() -> None:
    opts = DemoOpts.as_runopts()
    # ';' or ',' lists, spaces stripped, trailing separators ignored
    assert opts.cfg_from_str("hosts=h1; h2;,namespace=ns") == {
        "hosts": ["h1", "h2"], "namespace": "ns",
    }  # fmt: skip
    # k:v dicts continue over commas like lists do
    assert opts.cfg_from_str("labels=a:1,b:2,dry=true") == {
        "labels": {"a": "1", "b": "2"}, "dry": True,
    }  # fmt: skip
    assert opts.cfg_from_str("labels=team: ml; env: prod")["labels"] == {
        "team": "ml", "env": "prod",
    }  # fmt: skip


def test_structured_opts_is_a_mapping_and_camel_case_keys_resolve() -> None:
    o = DemoOpts.from_cfg({"namespace": "ml", "retries": 3})
    assert o["namespace"] == "ml" and dict(o)["retries"] == 3 and len(o) == 7
    assert o.get("nope") is None and "hosts" in o

    @dataclass
    class K8sLike(StructuredOpts):
        image_pull_policy: str = "IfNotPresent"
        """Pull policy."""

    assert K8sLike.from_cfg({"imagePullPolicy": "Always"}).image_pull_policy == "Always"
    assert K8sLike.as_runopts().cfg_from_str("imagePullPolicy=Never") == {
        "imagePullPolicy": "Never"
    }
    with pytest.raises(InvalidRunConfigException, match="given twice with different values"):
        K8sLike.from_cfg({"imagePullPolicy": "Always", "image_pull_policy": "Never"})


@dataclass
class K8s(StructuredOpts):
    context: str | None = None
    """Kube context."""
    image_repo: str = "r"
    """Repo."""


@dataclass
class Outer(StructuredOpts):
    k8s: K8s = field(default_factory=K8s)
    mail_user: str | None = field(default=None, metadata={"cfg_key": "mail-user"})
    """Who gets mail."""
    _private: int = 0


def test_groups_flatten_with_dotted_keys_and_cfg_key_metadata() -> None:
    opts = Outer.as_runopts()
    assert sorted(k for k, _ in opts) == ["k8s.context", "k8s.image_repo", "mail-user"]
    assert opts.get("k8s.context").help == "Kube context."  # type: ignore[union-attr]
    o = Outer.from_cfg({"k8s.context": "prod", "k8s.imageRepo": "x", "mail-user": "a@b"})
    assert (o.k8s.context, o.k8s.image_repo, o.mail_user) == ("prod", "x", "a@b")
    assert o["k8s.context"] == "prod" and o["mail-user"] == "a@b"
    assert dict(o) == {"k8s.context": "prod", "k8s.image_repo": "x", "mail-user": "a@b"}
    # the same option under two spellings with equal values counts once
    assert Outer.from_cfg({"k8s.imageRepo": "y", "k8s.image_repo": "y"}).k8s.image_repo == "y"


@dataclass
class ChoiceOpts(StructuredOpts):
    gang: Literal["none", "volcano"] = "none"
    """Gang scheduling: none or volcano."""
    policy: Literal["Always", "Never"] | None = None
    """Pull policy: Always or Never."""


def test_literal_choices_are_string_options() -> None:
    opts = ChoiceOpts.as_runopts()
    gang, policy = opts.get("gang"), opts.get("policy")
    assert gang is not None and gang.type_name() == "str" and gang.default == "none"
    assert policy is not None and policy.type_name() == "str" and policy.default is None
    assert gang.help == "Gang scheduling: none or volcano."
    parsed = opts.cfg_from_str("gang=volcano,policy=Always")
    assert ChoiceOpts.from_cfg(parsed) == ChoiceOpts(gang="volcano", policy="Always")
    with pytest.raises(InvalidRunConfigException, match=r"'gang'.*expects str, got int 3"):
        ChoiceOpts.from_cfg({"gang": 3})


def test_each_build_of_the_options_is_its_own() -> None:
    # the declarations are read once per class; what a caller changes in one runopts (or a
    # default it resolved) must not show in the next
    first = Outer.as_runopts()
    hosts = DemoOpts.as_runopts().get("hosts")
    assert hosts is not None and hosts.default == []
    hosts.default.append("h1")  # type: ignore[union-attr]
    ctx = first.get("k8s.context")
    assert ctx is not None
    ctx.help = "changed"
    first.add("extra", str, "More.")
    second = Outer.as_runopts()
    assert DemoOpts.as_runopts().get("hosts").default == []  # type: ignore[union-attr]
    assert DemoOpts.from_cfg({}).hosts == []
    assert second.get("k8s.context").help == "Kube context."  # type: ignore[union-attr]
    assert second.get("extra") is None
    assert second.name_of("mail_user") == "mail-user" and second.name_of("k8s.imageRepo") == (
        "k8s.image_repo")
