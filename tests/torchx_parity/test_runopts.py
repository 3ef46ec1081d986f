"""TorchX's run-option API (``runopts``, ``runopt``, ``StructuredOpts``), renamed to tether."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tether.specs import InvalidRunConfigException, StructuredOpts, runopts


def _opts() -> runopts:
    opts = runopts()
    opts.add("cluster_name", type_=str, help="cluster to submit to", default="c0")
    opts.add("tags", type_=list[str], help="tags")
    opts.add("labels", type_=dict[str, str], help="labels")
    opts.add("preemptible", type_=bool, default=False, help="preemptible")
    return opts


def test_is_type_understands_generic_types() -> None:
    assert runopts.is_type("foo", str)
    assert runopts.is_type(["a", "b"], list[str])
    assert not runopts.is_type(["a", 1], list[str])  # type: ignore[list-item]
    assert runopts.is_type({"a": "b"}, dict[str, str])
    assert not runopts.is_type({"a": 1}, dict[str, str])  # type: ignore[dict-item]
    assert not runopts.is_type("a", list[str])
    assert not runopts.is_type(None, str)


def test_get_accepts_camel_case() -> None:
    opts = _opts()
    found = opts.get("clusterName")
    assert found is not None and found is opts.get("cluster_name")
    assert opts.get("nope") is None


def test_cast_to_type() -> None:
    opts = _opts()
    tags, labels, flag = opts.get("tags"), opts.get("labels"), opts.get("preemptible")
    assert tags is not None and labels is not None and flag is not None
    assert tags.is_type_list_of_str and labels.is_type_dict_of_str
    assert tags.cast_to_type("a,b;c") == ["a", "b", "c"]
    assert labels.cast_to_type("a:1,b:2") == {"a": "1", "b": "2"}
    assert flag.cast_to_type("True") is True and flag.cast_to_type("false") is False
    with pytest.raises(InvalidRunConfigException):
        flag.cast_to_type("maybe")  # tether: not silently False (see the migration guide)


def test_cfg_from_json_repr() -> None:
    cfg = _opts().cfg_from_json_repr(
        '{"cluster_name": "c1", "tags": [1, "b"], "labels": {"x": 2}, "preemptible": null}'
    )
    assert cfg == {"cluster_name": "c1", "tags": ["1", "b"], "labels": {"x": "2"},
                   "preemptible": None}  # fmt: skip


def test_or_merges_into_a_new_runopts() -> None:
    a, b = runopts(), runopts()
    a.add("foo", type_=str, default="a", help="foo option")
    b.add("bar", type_=int, default=1, help="bar option")
    merged = a | b
    assert sorted(k for k, _ in merged) == ["bar", "foo"]
    assert len(a) == 1 and len(b) == 1


@dataclass
class K8sOpts(StructuredOpts):
    context: str = "kind"
    """Kube context to use."""


@dataclass
class OptsA(StructuredOpts):
    foo: str = "a"
    """The foo option."""

    k8s: K8sOpts | None = None
    """An optional group."""


@dataclass
class OptsB(StructuredOpts):
    bar: int = 1
    """The bar option."""


def test_structured_opts_or_merges_into_a_cfg_dict() -> None:
    cfg = OptsA(foo="x") | OptsB(bar=2)
    assert cfg["foo"] == "x" and cfg["bar"] == 2


def test_get_docstrings_includes_nested_groups() -> None:
    docs = OptsA.get_docstrings()
    assert docs["foo"] == "The foo option."
    assert docs["k8s.context"] == "Kube context to use."


def test_unset_optional_group_is_not_a_key() -> None:
    assert list(OptsA()) == ["foo"]
    assert "k8s" not in dict(OptsA())
    assert list(OptsA(k8s=K8sOpts())) == ["foo", "k8s.context"]


@dataclass
class MailGroup(StructuredOpts):
    mail_user: str | None = field(default=None, metadata={"cfg_key": "mail-user"})
    """Who gets mail."""


@dataclass
class SlurmLikeOpts(StructuredOpts):
    mail_user: str | None = field(default=None, metadata={"cfg_key": "mail-user"})
    """Who gets mail."""

    notify: MailGroup | None = None
    """A group whose option has a cfg_key too."""


def test_cfg_key_option_is_read_under_the_field_name_too() -> None:
    # TorchX's from_cfg reads cfg_key, the field name and its camelCase spelling
    assert SlurmLikeOpts.from_cfg({"mail-user": "a@b"}).mail_user == "a@b"
    assert SlurmLikeOpts.from_cfg({"mail_user": "a@b"}).mail_user == "a@b"
    assert SlurmLikeOpts.from_cfg({"mailUser": "a@b"}).mail_user == "a@b"
    assert SlurmLikeOpts.from_cfg({"notify.mail_user": "c@d"}).notify == MailGroup("c@d")
    # equal values under two spellings count once; different ones are an error
    assert SlurmLikeOpts.from_cfg({"mail_user": "x", "mail-user": "x"}).mail_user == "x"
    with pytest.raises(InvalidRunConfigException, match="'mail_user' and 'mail-user'"):
        SlurmLikeOpts.from_cfg({"mail_user": "x", "mail-user": "y"})
    # the option keeps its cfg_key as its name; lookups by the field name find it
    opts = SlurmLikeOpts.as_runopts()
    assert sorted(k for k, _ in opts) == ["mail-user", "notify.mail-user"]
    assert opts.get("mail_user") is opts.get("mail-user") is not None
    assert opts.resolve({"mail_user": "a@b"})["mail-user"] == "a@b"
    assert opts.cfg_from_str("mail_user=a@b") == {"mail_user": "a@b"}
    got = SlurmLikeOpts.from_cfg({"mail_user": "a@b"})
    assert got["mail_user"] == got["mail-user"] == "a@b"
    assert dict(got)["mail-user"] == "a@b" and "mail_user" not in dict(got)


def test_cfg_key_alias_survives_runopts_merge() -> None:
    merged = runopts() | SlurmLikeOpts.as_runopts()
    assert merged.resolve({"mail_user": "a@b"})["mail-user"] == "a@b"


def test_nested_dict_of_options_is_rejected_as_in_torchx() -> None:
    # TorchX reads a group only from dot-prefixed keys; a nested dict is no option
    with pytest.raises(InvalidRunConfigException, match="unknown run option 'notify'"):
        SlurmLikeOpts.from_cfg({"notify": {"mail-user": "a@b"}})  # type: ignore[dict-item]
