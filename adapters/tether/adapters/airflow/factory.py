"""Less boilerplate: component functions as typed tasks, and whole branches in one call.

* :func:`operator_for` turns a component function into a TaskFlow-style task whose call takes
  the component's own (typed) parameters::

      train = operator_for(my_trainer)
      with DAG(...):
          model = train(lr=0.1, epochs=3)                    # task "my_trainer"
          train.override(task_id="big", scheduler="kubernetes")(lr=0.01)
          train.expand(lr=[0.1, 0.01])                       # one mapped task per value

  ``train.operator_class`` is the same thing as a classic operator class
  (``train.operator_class(task_id="t", component_args={"lr": 0.1})``).
* :func:`component_chain` builds a branch (``a >> b >> [c, d] >> e``) from :func:`step` specs
  with shared defaults (scheduler, cfg, retries...).
* :func:`output_of` is the template that reads an upstream task's published output.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, cast

from tether.adapters.airflow.operator import ComponentArgs, ComponentOperator, ComponentRef
from tether.specs import AppDef

if TYPE_CHECKING:
    from airflow.sdk import XComArg
    from airflow.sdk.definitions.xcom_arg import PlainXComArg

P = ParamSpec("P")

OPERATOR_ONLY = frozenset({"component", "component_args"})


def _unique_task_id(task_id: str) -> str:
    try:
        from airflow.sdk.bases.decorator import get_unique_task_id
    except ImportError:  # pragma: no cover - older task SDKs
        return task_id
    return get_unique_task_id(task_id)


def output_of(task_id: str, name: str) -> str:
    """A template that renders to an output an upstream tether task published.

    Use it in ``component_args``/``env`` (templated): ``{"data_dir": output_of("prepare",
    "data_dir")}``. The upstream task must run before (set the dependency, or use
    :func:`component_chain`).

    Args:
        task_id: The upstream task.
        name: The output's name.

    Returns:
        ``{{ ti.xcom_pull(task_ids='prepare', key='data_dir') }}``.
    """
    for what, value in (("task_id", task_id), ("name", name)):
        if not value or "'" in value or "\\" in value:
            raise ValueError(f"output_of: {what} {value!r} must be non-empty without quotes")
    return f"{{{{ ti.xcom_pull(task_ids='{task_id}', key='{name}') }}}}"


def _bind(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """Keyword ``component_args`` from a call of the component's signature."""
    sig = inspect.signature(fn)
    try:
        bound = sig.bind_partial(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{getattr(fn, '__qualname__', fn)}{sig}: {e}") from None
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            out[name] = list(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out


def _check_names(fn: Callable[..., Any], names: Iterable[str]) -> None:
    """Fails at parse time on an argument name the component does not have."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    for name in sorted(names):
        if name not in params:
            raise TypeError(
                f"{getattr(fn, '__qualname__', fn)}() got an unexpected keyword argument "
                f"{name!r} (its arguments: {', '.join(params)})"
            )


class ComponentTask(Generic[P]):
    """A component function as a TaskFlow-style task (see :func:`operator_for`).

    Args:
        fn: The component function.
        task_id: The task id (default: the function's name; made unique in the DAG).
        operator_kwargs: :class:`ComponentOperator` / ``BaseOperator`` arguments for every
            task made from it (``scheduler``, ``cfg``, ``retries``...).
    """

    def __init__(
        self, fn: Callable[P, AppDef], task_id: str | None = None, **operator_kwargs: Any
    ) -> None:
        bad = OPERATOR_ONLY & set(operator_kwargs)
        if bad:
            raise TypeError(
                f"operator_for({fn.__qualname__}): {', '.join(sorted(bad))} come from the "
                "component function and its call; pass component arguments to the call"
            )
        self.fn = fn
        self.task_id = task_id or fn.__name__
        self.operator_kwargs = operator_kwargs
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    @functools.cached_property
    def operator_class(self) -> type[ComponentOperator]:
        """A :class:`ComponentOperator` subclass with this component fixed."""
        fn = self.fn
        defaults = dict(self.operator_kwargs)

        def __init__(self: ComponentOperator, **kwargs: Any) -> None:
            merged = {**defaults, **kwargs}
            ComponentOperator.__init__(self, component=fn, **merged)

        name = "".join(p.title() for p in fn.__name__.split("_")) + "Operator"
        return type(name, (ComponentOperator,), {"__init__": __init__, "__doc__": fn.__doc__})

    def override(self, **operator_kwargs: Any) -> ComponentTask[P]:
        """The same task with other operator arguments (``task_id``, ``scheduler``...).

        Args:
            **operator_kwargs: Arguments that replace or add to this task's.

        Returns:
            A new task factory.
        """
        kwargs = {**self.operator_kwargs, **operator_kwargs}
        task_id = kwargs.pop("task_id", self.task_id)
        return ComponentTask(self.fn, task_id, **kwargs)

    def operator(self, *args: P.args, **kwargs: P.kwargs) -> ComponentOperator:
        """Adds the task to the current DAG and returns its operator.

        Args:
            *args: The component's positional arguments (its ``*args``).
            **kwargs: The component's keyword arguments (values may be templates or XComArgs).

        Returns:
            The operator.
        """
        return ComponentOperator(
            task_id=_unique_task_id(self.task_id),
            component=self.fn,
            component_args=_bind(self.fn, args, kwargs),
            **self.operator_kwargs,
        )

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> PlainXComArg:
        """Adds the task to the current DAG; returns its output (the job's outputs).

        ``result["name"]`` is the single output ``name`` (each output is its own XCom).

        Args:
            *args: The component's positional arguments.
            **kwargs: The component's keyword arguments.

        Returns:
            The task's XComArg.
        """
        return cast("PlainXComArg", self.operator(*args, **kwargs).output)

    def expand(self, *, fixed: Mapping[str, Any] | None = None, **mapped: Any) -> XComArg:
        """A mapped task: one task instance per combination of the mapped values.

        Literal lists are combined (a cross product) when the DAG is parsed. A single upstream
        XComArg that yields a list of keyword dicts maps over it at run time:
        ``train.expand(component_args=prepare_grid())``.

        Args:
            fixed: Component arguments shared by every instance.
            **mapped: Component argument name to a list of values, or ``component_args`` to an
                XComArg of dicts.

        Returns:
            The mapped task's XComArg.
        """
        from airflow.sdk import XComArg

        if not mapped:
            raise TypeError("expand() needs at least one mapped argument, e.g. lr=[0.1, 0.01]")
        partial = ComponentOperator.partial(
            task_id=_unique_task_id(self.task_id), component=self.fn, **self.operator_kwargs
        )
        if "component_args" in mapped:
            if len(mapped) > 1 or fixed:
                raise TypeError(
                    "expand(component_args=...) maps over whole argument dicts: give it alone "
                    "(put shared arguments into each dict)"
                )
            return partial.expand(component_args=mapped["component_args"]).output
        lazy = [k for k, v in mapped.items() if isinstance(v, XComArg)]
        if lazy:
            raise TypeError(
                f"expand({lazy[0]}=<XComArg>): only literal lists are combined at parse time; "
                "map over an upstream list of argument dicts with expand(component_args=...)"
            )
        names = list(mapped)
        for n in names:
            if isinstance(mapped[n], (str, bytes)) or not isinstance(mapped[n], Iterable):
                raise TypeError(f"expand({n}=...) needs a list of values, got {mapped[n]!r}")
        combos = [
            {**(fixed or {}), **dict(zip(names, values))}
            for values in itertools.product(*(list(mapped[n]) for n in names))
        ]
        _check_names(self.fn, {k for combo in combos for k in combo})
        return partial.expand(component_args=combos).output


def operator_for(
    fn: Callable[P, AppDef], task_id: str | None = None, **operator_kwargs: Any
) -> ComponentTask[P]:
    """Turns a component function into a TaskFlow-style task with its typed parameters.

    Args:
        fn: The component function.
        task_id: The task id (default: the function's name).
        **operator_kwargs: Operator arguments for every task made from it.

    Returns:
        The task factory: call it inside a DAG; ``.operator_class`` is a classic operator class.
    """
    return ComponentTask(fn, task_id, **operator_kwargs)


@dataclass
class Step:
    """One task of :func:`component_chain`.

    Attributes:
        task_id: The task id.
        component: The component (name or function).
        args: Its arguments (dict, CLI list or CLI string).
        operator_kwargs: Operator arguments overriding the chain's defaults.
    """

    task_id: str
    component: ComponentRef
    args: ComponentArgs = None
    operator_kwargs: dict[str, Any] = field(default_factory=dict)


def step(
    task_id: str, component: ComponentRef, args: ComponentArgs = None, **operator_kwargs: Any
) -> Step:
    """A task spec for :func:`component_chain`.

    Args:
        task_id: The task id.
        component: The component (name or function).
        args: Its arguments.
        **operator_kwargs: Operator arguments for this task only.

    Returns:
        The spec.
    """
    return Step(task_id, component, args, dict(operator_kwargs))


ChainItem = Step | ComponentOperator | Sequence[Step | ComponentOperator]


def component_chain(*items: ChainItem, **defaults: Any) -> list[ComponentOperator]:
    """Builds a branch of tether tasks in the current DAG, each after the previous item.

    A list (or tuple) in ``items`` is a group of parallel tasks. ``defaults`` go to every task
    (``scheduler``, ``cfg``, ``env``, ``retries``, ``deferrable``...); a step's own
    ``operator_kwargs`` win.

    Args:
        *items: :func:`step` specs or operators, in order; lists run in parallel.
        **defaults: Operator arguments for every task.

    Returns:
        The operators, in order.
    """
    from airflow.sdk import chain

    if not items:
        raise TypeError("component_chain() needs at least one step")

    def make(item: Step | ComponentOperator) -> ComponentOperator:
        if isinstance(item, ComponentOperator):
            return item
        if not isinstance(item, Step):
            raise TypeError(
                f"component_chain: expected step(...) or a ComponentOperator, got {item!r}"
            )
        kwargs = {**defaults, **item.operator_kwargs}
        return ComponentOperator(
            task_id=item.task_id, component=item.component, component_args=item.args, **kwargs
        )

    levels: list[ComponentOperator | list[ComponentOperator]] = []
    flat: list[ComponentOperator] = []
    for item in items:
        if isinstance(item, (list, tuple)):
            group = [make(i) for i in item]
            levels.append(group)
            flat.extend(group)
        else:
            op = make(item)  # type: ignore[arg-type]
            levels.append(op)
            flat.append(op)
    chain(*levels)
    return flat
