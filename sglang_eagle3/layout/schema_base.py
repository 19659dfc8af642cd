"""The base of every pydantic schema here, and the one place a pydantic ValidationError turns
into the one-line WiringError users see (the file, the dotted field, a fix; never a traceback).

Validators raise WiringError (a ValueError, so pydantic collects it); when its message starts
with the validated key, the key is widened to the full dotted name. Pure: pydantic only.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo
from typing_extensions import Self

from sglang_eagle3.errors import WiringError

# models of parsed JSON: JSON has no "16" for 16, and real configs carry keys nobody reads
JSON_STRICT = ConfigDict(strict=True, extra="ignore", frozen=True)

# pydantic error type -> what the field must be ({...}: the error's context)
_WANT = {
    "int_type": "an int",
    "int_parsing": "an int",
    "int_from_float": "an int",
    "greater_than_equal": "{kind} >= {ge:g}",
    "greater_than": "> {gt:g}",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "a bool",
    "bool_parsing": "a bool",
    "string_type": "a str",
    "string_pattern_mismatch": "a str matching {pattern}",
    "list_type": "a list",
    "tuple_type": "a list",
    "too_short": "a list of at least {min_length}",
    "dict_type": "a dict",
    "model_type": "a dict",
    "literal_error": "one of {expected}",
    "enum": "one of {expected}",
    "is_instance_of": "a {class}",
}


class SchemaModel(BaseModel):
    """A pydantic model whose parsed-JSON input fails with one WiringError (``load``)."""

    error_prefix: ClassVar[str] = ""  # starts the field names in its errors
    field_word: ClassVar[str] = "field "  # "field hidden_size must be ..."

    @classmethod
    def load(cls, data: Any, *, path: str, fix: str | None = None, prefix: str = "") -> Self:
        """Validate parsed JSON read from ``path`` (``prefix``: where ``data`` sits in it, e.g.
        ``"transformer_layer_config."``); any problem is one WiringError."""
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise wiring_error(err, cls, path=path, fix=fix, prefix=prefix) from None


class CheckedModel(SchemaModel):
    """A model code builds (never nested in another: pydantic would call this ``__init__``
    and lose the field's location), whose construction fails with a WiringError too.
    ``path_field`` names the field holding the file the values came from."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")
    path_field: ClassVar[str | None] = None
    field_word: ClassVar[str] = ""  # "DraftSpec.num_aux must be ...": an attribute, not a key

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as err:
            path = data.get(self.path_field) if self.path_field else None
            raise wiring_error(
                err, type(self), path=path if isinstance(path, str) else None
            ) from None


def wiring_error(
    err: ValidationError,
    model: type[SchemaModel] | None = None,
    *,
    path: str | None,
    fix: str | None = None,
    prefix: str = "",
) -> WiringError:
    """The first problem in ``err`` (raised validating ``model``) as one WiringError naming
    ``path`` and the dotted field (``prefix`` + its location)."""
    first = err.errors(include_url=False)[0]
    loc = [str(part) for part in first["loc"]]
    name = prefix + (model.error_prefix if model else "") + ".".join(loc)
    word = model.field_word if model else "field "
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, WiringError):
        message = cause.message
        if loc and message.startswith(loc[-1]):  # the validator named only its own key
            message = name + message[len(loc[-1]) :]
        return type(cause)(message, path=cause.path or path, fix=cause.fix or fix)
    if first["type"] == "missing":
        return WiringError(f"missing field {name}", path=path, fix=fix or f"add {name}")
    if first["type"] not in _WANT:
        detail = first["msg"][:1].lower() + first["msg"][1:]
        return WiringError(f"{word}{name}: {detail}", path=path, fix=fix)
    want = _want(first, _field_info(model, first["loc"]))
    value = "a value " if want.startswith(">") else ""
    return WiringError(
        f"{word}{name} must be {want}, got {first['input']!r}",
        path=path,
        fix=fix or f"set {name} to {value}{want}",
    )


def _want(error: Mapping[str, Any], info: FieldInfo | None) -> str:
    """What the field must be, with its bound: "an int >= 1", not just "an int"."""
    is_int = info is not None and int in (info.annotation, *typing.get_args(info.annotation))
    bound = None if info is None else next((m.ge for m in info.metadata if hasattr(m, "ge")), None)
    if error["type"].startswith("int_") and bound is not None:
        return f"an int >= {bound}"
    ctx = dict(error.get("ctx") or {})
    return _WANT[error["type"]].format(kind="an int" if is_int else "a number", **ctx)


def _field_info(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> FieldInfo | None:
    """The FieldInfo at ``loc`` below ``model`` (None past a list index or an unknown key)."""
    info = None
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        info = model.model_fields[part]
        model = _model_in(info.annotation)
    return info


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class in ``annotation`` (``X`` or ``X | None``)."""
    for t in (annotation, *typing.get_args(annotation)):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None
