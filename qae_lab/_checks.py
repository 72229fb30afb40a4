r"""Input validation shared by the package: generic helpers, importing nothing of qae_lab.

Every public function of qae_lab checks its input with these where it enters (once: an inner call of checked
tensors goes to the unchecked core), so a bad call fails at once with a :class:`ValueError` naming the argument and
the allowed range. The checks on tensor *values* read one boolean back from the device (a host synchronisation on a
GPU): ``QAETrainer`` turns them off inside its loss step (:func:`value_checks`). :func:`credential_name` is the one
rule for names that carry a secret, which nothing qae_lab writes may hold.
"""

from __future__ import annotations

import contextlib
import contextvars
import decimal
import json
import math
import numbers
import os
import re
import stat
import urllib.parse

import torch

__all__ = [
    "host_floats",
    "as_real_tensor",
    "as_count_tensor",
    "check_group_size",
    "check_k",
    "check_k_list",
    "check_int",
    "check_finite_scalar",
    "check_positive",
    "check_choice",
    "check_mask",
    "snap_to_integer",
    "credential_name",
    "address_credential",
    "address_name",
    "credential_in",
    "nul_in",
    "plain_value",
    "json_value",
    "json_mapping",
    "check_path",
    "check_regular_file",
    "non_finite",
    "value_checks",
    "checking_values",
]

# whether the checks on tensor values run (value_checks); QAE_LAB_CHECK_VALUES=1 keeps them on everywhere
_VALUE_CHECKS = contextvars.ContextVar("qae_lab_value_checks", default=True)
CHECK_VALUES_ENV = "QAE_LAB_CHECK_VALUES"


def checking_values() -> bool:
    """Whether the checks on tensor values run here (:func:`value_checks`): the guard of a module's own value check."""
    return _VALUE_CHECKS.get()


def host_floats(values) -> list[float]:
    r"""A tensor's values, or a sequence of 0-dim tensors', as floats read back to the host in one transfer (one
    synchronisation on a GPU, where ``.item()`` costs one apiece).

    >>> host_floats([torch.tensor(0.5), torch.tensor(2)])
    [0.5, 2.0]
    """
    if not isinstance(values, torch.Tensor):
        values = torch.stack([torch.as_tensor(v).reshape(()).double() for v in values]) if len(values) else None
    return [] if values is None else values.detach().to("cpu", torch.float64).flatten().tolist()


@contextlib.contextmanager
def value_checks(enabled: bool):
    r"""Within the block or decorated function (this thread or task), the checks on tensor *values* (each a read back
    to the host) run only if ``enabled``, or where ``QAE_LAB_CHECK_VALUES=1``; shapes, dtypes and scalars always.

    >>> with value_checks(False):
    ...     as_real_tensor([float("nan")], "x")
    tensor([nan], dtype=torch.float64)
    """
    token = _VALUE_CHECKS.set(bool(enabled) or os.environ.get(CHECK_VALUES_ENV) == "1")
    try:
        yield
    finally:
        _VALUE_CHECKS.reset(token)


def as_real_tensor(x, name: str, *, ndim: int | None = None, shape=None) -> torch.Tensor:
    r"""``x`` as a finite real floating tensor (of ``ndim`` dimensions, of ``shape``: a size None is any), or raise
    naming ``name``. Python numbers, lists and numpy arrays become float64; bool and integer tensors float32;
    half/bfloat16 are upcast to float32 (quantiles and cumulative sums need it).

    >>> as_real_tensor([1, 2], "r"), as_real_tensor(torch.tensor([True, False]), "mask").dtype
    (tensor([1., 2.], dtype=torch.float64), torch.float32)
    >>> as_real_tensor([1.0, float("nan")], "rewards")
    Traceback (most recent call last):
    ValueError: rewards must be finite (no NaN or inf)
    """
    if not isinstance(x, torch.Tensor):
        try:  # Python numbers and lists mean what they say: float64, not torch's float32 default
            x = torch.as_tensor(x, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"{name} must be a real-valued tensor, got {type(x).__name__}") from err
    if x.is_complex():
        raise ValueError(f"{name} must be real-valued, got dtype {x.dtype}")
    if x.dtype == torch.bool or not x.is_floating_point():
        x = x.to(torch.float32)
    elif x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(x.shape)}")
    if shape is not None and (x.dim() != len(shape) or any(n not in (None, k) for n, k in zip(shape, x.shape))):
        want = str(tuple(shape)).replace("None", "any")
        raise ValueError(f"{name} must have shape {want}, got {tuple(x.shape)}")
    if x.numel() and checking_values() and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return x


def as_count_tensor(x, name: str, hi: int, hi_name: str) -> torch.Tensor:
    r"""``x`` (tensor, list or number) as a tensor of whole numbers in [0, hi] (``hi_name``: where the bound comes
    from), or raise. Integer tensors keep their dtype; bool tensors are refused: a count is not a success flag.

    >>> as_count_tensor([0, 3], "success_count", 8, "group_size=8")
    tensor([0, 3])
    """
    rng = f"[0, {hi_name}]"
    if not isinstance(x, torch.Tensor):
        try:
            t = torch.as_tensor(x)
            # Python floats: read as float64, so 2.0000001 is not rounded to a whole float32 2
            x = torch.as_tensor(x, dtype=torch.float64) if t.is_floating_point() else t
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"{name} must be whole numbers in {rng}, got {type(x).__name__}") from err
    if x.dtype == torch.bool or x.is_complex():
        raise ValueError(f"{name} must be whole numbers in {rng} (an integer or float tensor), got dtype {x.dtype}")
    if not x.numel() or not checking_values():
        return x
    if x.is_floating_point():
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} must be finite whole numbers in {rng} (no NaN or inf)")
        bad = x != x.round()
        if bool(bad.any()):
            raise ValueError(f"{name} must be whole numbers in {rng}, got {x[bad].flatten()[0].item()}")
    bad = (x < 0) | (x > hi)
    if bool(bad.any()):
        raise ValueError(f"{name} must lie in {rng}, got {x[bad].flatten()[0].item()}")
    return x


def check_group_size(group_size, n: int, *, name: str = "group_size") -> int:
    r"""``group_size``, checked: an int >= 2 that divides ``n`` (> 0).

    >>> check_group_size(4, 12)
    4
    >>> check_group_size(4, 10)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: rewards has 10 entries, not a multiple of group_size=4: ragged groups are not allowed ...
    """
    if isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral):
        raise ValueError(f"{name} must be an int >= 2, got {group_size!r}")
    group_size = int(group_size)
    if group_size < 2:
        raise ValueError(f"{name} must be >= 2 (a group needs at least two responses), got {group_size}")
    if n == 0:
        raise ValueError("rewards must hold at least one group, got an empty tensor")
    if n % group_size:
        raise ValueError(
            f"rewards has {n} entries, not a multiple of {name}={group_size}: "
            "ragged groups are not allowed (responses of one prompt must be contiguous, G per prompt)"
        )
    return group_size


def check_int(x, name: str, lo: int, hi: int | None = None) -> int:
    r"""``x`` as an int in [lo, hi] (hi None: unbounded); bools and floats are rejected.

    >>> check_int(3, "n", 1), check_int(0, "steps", 0)
    (3, 0)
    """
    rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise ValueError(f"{name} must be an int {rng}, got {x!r}")
    x = int(x)
    if x < lo or (hi is not None and x > hi):
        raise ValueError(f"{name} must be an int {rng}, got {x}")
    return x


def check_finite_scalar(x, name: str) -> float:
    r"""``x`` as a Python float, refused unless a finite real number.

    >>> check_finite_scalar(3, "x"), check_finite_scalar(torch.tensor(0.5), "eta")
    (3.0, 0.5)
    >>> check_finite_scalar(float("inf"), "eta")
    Traceback (most recent call last):
    ValueError: eta must be finite, got inf
    """
    if isinstance(x, torch.Tensor):
        if x.numel() != 1:
            raise ValueError(f"{name} must be a scalar, got a tensor of shape {tuple(x.shape)}")
        x = x.item()
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise ValueError(f"{name} must be a finite real number, got {x!r}")
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {x}")
    return x


def check_positive(x, name: str) -> float:
    r"""``x`` as a float, refused unless finite and > 0.

    >>> check_positive(2, "eta")
    2.0
    >>> check_positive(0, "eta")
    Traceback (most recent call last):
    ValueError: eta must be > 0, got 0.0
    """
    x = check_finite_scalar(x, name)
    if x <= 0:
        raise ValueError(f"{name} must be > 0, got {x}")
    return x


def check_k(k, name: str = "k") -> float:
    r"""The quantile level ``k`` as a float, refused outside the open interval (0, 1).

    >>> check_k(0.4)
    0.4
    >>> check_k(1)
    Traceback (most recent call last):
    ValueError: k must lie in the open interval (0, 1), got 1.0
    """
    k = check_finite_scalar(k, name)
    if not 0.0 < k < 1.0:
        raise ValueError(f"{name} must lie in the open interval (0, 1), got {k}")
    return k


def check_k_list(ks, name: str = "ks") -> list[float]:
    r"""A non-empty sequence of K values as Python floats, each in (0, 1); never through a float32 tensor, which
    would make 0.2 0.20000000298... and move quantile positions off their integers.

    >>> check_k_list(torch.tensor([0.5, 0.25], dtype=torch.float64))
    [0.5, 0.25]
    """
    if isinstance(ks, torch.Tensor):
        ks = ks.tolist()  # a 0-dim tensor gives a float, refused below like a bare number
    if isinstance(ks, (str, bytes)) or not hasattr(ks, "__iter__"):
        raise ValueError(f"{name} must be a sequence of K values in (0, 1) (e.g. [0.4]), got {ks!r}")
    ks = list(ks)
    if not ks:
        raise ValueError(f"{name} must hold at least one K")
    return [check_k(k, name) for k in ks]


def check_choice(value, name: str, allowed: tuple[str, ...]) -> str:
    r"""``value``, refused unless one of ``allowed``.

    >>> check_choice("mean", "baseline", ("mean", "quantile"))
    'mean'
    >>> check_choice("median", "baseline", ("mean", "quantile"))
    Traceback (most recent call last):
    ValueError: baseline must be one of ('mean', 'quantile'), got 'median'
    """
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def check_mask(mask, shape: torch.Size, name: str = "mask") -> torch.Tensor:
    r"""``mask`` as a float 0/1 tensor of ``shape``; other shapes and values are refused.

    >>> check_mask(torch.tensor([True, False, True]), (3,))
    tensor([1., 0., 1.])
    >>> check_mask([1, 2], (2,))
    Traceback (most recent call last):
    ValueError: mask must hold only 0 and 1 (or be a bool tensor)
    """
    if not isinstance(mask, torch.Tensor):
        mask = torch.as_tensor(mask)
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(mask.shape)}")
    if mask.is_complex():
        raise ValueError(f"{name} must be real-valued, got dtype {mask.dtype}")
    if mask.dtype != torch.bool and mask.numel() and checking_values() and not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"{name} must hold only 0 and 1 (or be a bool tensor)")
    return mask.to(torch.float32)


def snap_to_integer(x: float) -> float:
    r"""``x`` rounded to the nearest integer if it lies within 1e-9 (relative) of it, else ``x``.

    >>> snap_to_integer(0.28 * 25), snap_to_integer(0.2 * 15), snap_to_integer(2.5)
    (7.0, 3.0, 2.5)
    """
    nearest = round(x)
    return float(nearest) if abs(x - nearest) <= 1e-9 * max(1.0, abs(x)) else x


# name parts that mark a credential; "TOKEN" only as the last part (TrainingArguments' own rule: it hides every
# field ending in "_token" from to_dict), so that e.g. pad_token_id or max_tokens is not one
_CREDENTIAL_PARTS = frozenset({"KEY", "APIKEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS"})


def credential_name(name: str) -> bool:
    r"""Whether a setting or environment variable named ``name`` carries a credential: its last part (split at
    ``_``, any case) is ``TOKEN``, or a part is ``KEY``, ``APIKEY``, ``SECRET``, ``PASSWORD``, ``PASSWD`` or
    ``CREDENTIAL(S)``.

    >>> [credential_name(n) for n in ("hub_token", "HF_TOKEN", "WANDB_API_KEY", "db_password", "COMET_APIKEY")]
    [True, True, True, True, True]
    >>> [credential_name(n) for n in ("pad_token_id", "max_tokens", "keyword", "WANDB_PROJECT", "monkey")]
    [False, False, False, False, False]
    """
    parts = str(name).upper().split("_")
    return parts[-1] == "TOKEN" or bool(_CREDENTIAL_PARTS & set(parts))


# a key in an address (query, fragment, path parameter) that names a credential: one of these words as a part of it
# (split at _ - . and spaces and between camelCase words, any case), or a key that ends in one of the longer ones
_KEY_WORDS = frozenset(
    "token key apikey secret password passwd pwd pw pass signature sig auth authorization credential credentials "
    "session jwt bearer".split()
)
_KEY_ENDINGS = ("token", "key", "secret", "password", "passwd", "pwd", "signature", "credential", "credentials")
_ADDRESS_NAMES = ("HOST", "URL", "URI", "ENDPOINT", "SERVER", "ADDRESS")  # a setting that names where to connect


def _credential_key(key: str) -> bool:
    words = [w.lower() for w in re.split(r"[_\-.\s]+|(?<=[a-z0-9])(?=[A-Z])", key) if w]
    return bool(_KEY_WORDS & set(words)) or "".join(words).endswith(_KEY_ENDINGS)


def _credential_mapping_key(key: str) -> bool:
    """Whether a mapping's key names a credential: :func:`credential_name` of it read as snake case (``api-key``,
    ``accessToken`` and ``api.key`` too), or a part of it names one (``auth``, ``bearer``, ``signature``, ...);
    ``pad_token_id`` and ``max_new_tokens`` do not."""
    snake = "_".join(w for w in re.split(r"[_\-.\s]+|(?<=[a-z0-9])(?=[A-Z])", key) if w)
    return credential_name(snake) or bool(set(snake.lower().split("_")) & _MAPPING_KEY_WORDS)


_MAPPING_KEY_WORDS = frozenset({"auth", "authorization", "bearer", "jwt", "signature", "passwd", "pwd"})


def address_name(name: str) -> bool:
    r"""Whether a setting or variable named ``name`` holds an address (a host, URL, URI, endpoint, server or address),
    where :func:`address_credential` reads a user part without a scheme too (``user@host:8000``).

    >>> address_name("vllm_server_host"), address_name("MLFLOW_TRACKING_URI"), address_name("run_name")
    (True, True, False)
    """
    return any(part in _ADDRESS_NAMES for part in re.split(r"[_\-.]+", str(name).upper()))


def address_credential(text, *, host: bool = False) -> str | None:
    r"""Which part of an address ``text`` carries a credential, in words without the credential itself: a user part
    (``scheme://user@host``), a password (``user:pw@``), or a query, fragment or path-parameter key that names a
    token, key, secret, password or signature (``?api_key=``, ``?accessToken=``, ``#access_token=``,
    ``X-Amz-Signature=``, ``;token=``); None for an address without one, and for text that is no address. Without a
    scheme, ``user:pw@host`` is read as an address; ``user@host`` too when ``host`` (a setting that names a host,
    :func:`address_name`; elsewhere it may be an e-mail address).

    >>> address_credential("https://TOKEN@tracking.example"), address_credential("http://h:8000/?accessToken=abc")
    ('a user part (scheme://user@host)', "the query key 'accessToken'")
    >>> address_credential("user:pw@myhost"), address_credential("tok@myhost:8000", host=True)
    ('a password (scheme://user:password@host)', 'a user part (scheme://user@host)')
    >>> [address_credential(t) for t in ("https://tracking.example:5000/x?run=3&keyword=a", "file:///tmp/mlruns", "sdpa")]
    [None, None, None]
    """
    if not isinstance(text, str) or not (":" in text or "@" in text):
        return None
    text = text.strip()
    if "://" not in text and "@" in text and not any(c.isspace() for c in text):
        if host or ":" in text.split("@", 1)[0]:
            text = "//" + text  # a host given without a scheme (TRL builds http://{host}:{port} from it)
    try:
        parts = urllib.parse.urlparse(text)
        user, password = parts.username, parts.password
    except ValueError:  # not an address at all (e.g. an unbalanced bracket)
        return None
    if password is not None:
        return "a password (scheme://user:password@host)"
    if user is not None:
        return "a user part (scheme://user@host)"
    pieces = (("query", parts.query), ("fragment", parts.fragment), ("path parameter", parts.params.replace(";", "&")))
    for where, piece in pieces:
        for key, _value in urllib.parse.parse_qsl(piece, keep_blank_values=True):
            if _credential_key(key):
                return f"the {where} key {key!r}"
    return None


def credential_in(value, name: str) -> str | None:
    r"""Where a setting's value holds a credential, said without it: an address with one (:func:`address_credential`,
    reading ``user@host`` where ``name`` names an address) or a mapping key that names one (:func:`credential_name`),
    searched through lists and mappings; None when there is none.

    >>> credential_in({"url": "https://u:pw@h"}, "lr_scheduler_kwargs"), credential_in(["a", "b"], "report_to")
    ('lr_scheduler_kwargs.url is an address with a password (scheme://user:password@host) in it', None)
    """
    if isinstance(value, str):
        part = address_credential(value, host=address_name(name))
        return f"{name} is an address with {part} in it" if part else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        where = f"{name}.{key}" if isinstance(value, dict) else f"{name}[{key}]"
        if isinstance(value, dict) and _credential_mapping_key(str(key)) and item not in (None, ""):
            return f"{where} carries a credential"
        if isinstance(value, dict) and address_credential(str(key)):
            return f"{name} holds a key that is an address with {address_credential(str(key))} in it"
        found = credential_in(item, where if isinstance(value, dict) else name)
        if found:
            return found
    return None


def nul_in(value, name: str) -> str | None:
    r"""Where a setting's value holds a NUL byte (no file system, process or library takes one), searched through
    lists and mappings (their keys too): the place, or None.

    >>> nul_in({"a": ["x", "y\x00"]}, "fsdp_config"), nul_in("run-1", "run_name")
    ('fsdp_config.a[1]', None)
    """
    if isinstance(value, str):
        return name if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        if isinstance(key, str) and "\x00" in key:
            return f"{name} (a key)"
        found = nul_in(item, f"{name}.{key}" if isinstance(value, dict) else f"{name}[{key}]")
        if found:
            return found
    return None


def plain_value(value):
    r"""A setting's value with every number as Python's own: numpy and torch scalars become ``int``, ``float`` or
    ``bool``, arrays and tensors lists, ``Decimal`` a float, through lists, tuples and mappings; the rest as given.
    Settings are checked and recorded in this form, so a number means the same whatever type it came in.

    >>> import numpy as np
    >>> plain_value({"w": [np.float32(0.5), torch.tensor(2), np.bool_(True)]}), plain_value(np.array([1.0, 2.0]))
    ({'w': [0.5, 2, True]}, [1.0, 2.0])
    """
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, torch.Tensor) or type(value).__module__ == "numpy":
        return plain_value(value.tolist()) if hasattr(value, "tolist") else value
    if isinstance(value, decimal.Decimal):  # a whole Decimal is an int, as Python's own 10 is
        return int(value) if value.is_finite() and value == value.to_integral_value() else float(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, dict):
        return {k: plain_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain_value(v) for v in value)
    return value


def key_words(key) -> str:
    """A mapping key as an error message may say it: its repr, or where it is an address holding a credential
    (:func:`address_credential`), which part, without the key.

    >>> key_words("lr"), key_words("https://u:pw@h")
    ("'lr'", 'a key with a password (scheme://user:password@host) in it')
    """
    part = address_credential(key)
    return f"a key with {part} in it" if part else repr(key)


def _unique_keys(pairs: list) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"{key_words(key)} is set twice in one JSON object: set it once")
        out[key] = value
    return out


def json_value(text: str, name: str):
    r"""A setting's JSON text as a value, a key given twice in an object refused (``json.loads`` keeps the last), as
    text that is not JSON; errors name ``name``.

    >>> json_value("[1, 2]", "levels")
    [1, 2]
    >>> json_value('{"a": 1, "a": 2}', "model_init_kwargs")
    Traceback (most recent call last):
    ValueError: model_init_kwargs: 'a' is set twice in one JSON object: set it once
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise ValueError(f"{name}: not valid JSON ({err})") from None
    except RecursionError:
        raise ValueError(f"{name}: nested too deep to read") from None
    except ValueError as err:  # a key given twice
        raise ValueError(f"{name}: {err}") from None


def json_mapping(text: str, name: str) -> dict:
    r"""A mapping setting's JSON object string (``'{"dtype": "bfloat16"}'``) as a dict, read as JSON reads it (its
    strings stay strings; :func:`json_value`); JSON that is no object is refused. Every form of a mapping setting is
    read by this one function before any check.

    >>> json_mapping(' {"dtype": "bfloat16", "use_cache": false}', "model_init_kwargs")
    {'dtype': 'bfloat16', 'use_cache': False}
    """
    value = json_value(text, name)
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object ({{...}}), got {type(value).__name__}")
    return value


_PATH_MAX, _NAME_MAX = 4096, 255  # bytes: the longest path and file name Linux and macOS accept


def check_path(value, name: str, *, room: int = 0) -> str:
    r"""``value`` as a path string the file system can take, or a ``ValueError`` naming ``name`` and what is wrong:
    not a string, empty, a NUL byte, not encodable, a name longer than 255 bytes or a path longer than 4096 (with
    ``room``: its absolute form no longer than 4096 - ``room``, so that what is written inside it fits too).

    >>> check_path("runs/my-run", "output_dir")
    'runs/my-run'
    >>> check_path("runs/a\x00b", "output_dir")
    Traceback (most recent call last):
    ValueError: output_dir holds a NUL byte (at 6), which no file system takes in a path
    """
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty path, got {value!r}")
    if "\x00" in value:
        raise ValueError(f"{name} holds a NUL byte (at {value.index(chr(0))}), which no file system takes in a path")
    try:
        encoded = os.fsencode(value)
    except UnicodeError:
        raise ValueError(f"{name} holds characters the file system cannot encode: {value!r}") from None
    longest = max(len(part) for part in encoded.split(b"/"))
    whole = len(os.fsencode(os.path.abspath(value))) if room else len(encoded)
    if whole > _PATH_MAX - room or longest > _NAME_MAX:
        raise ValueError(
            f"{name} is too long for a file system ({whole} bytes, a name of {longest}; at most "
            f"{_PATH_MAX - room}{f' (room kept for the {room} bytes of what is written inside it)' if room else ''} "
            f"and {_NAME_MAX})"
        )
    return value


def check_regular_file(path, name: str) -> None:
    r"""Refuse, naming ``name``, a ``path`` that is missing or no regular file (a folder, a named pipe, a device):
    asked with ``os.stat``, which never blocks where opening a named pipe would wait for a writer forever.

    >>> check_regular_file("/dev/null", "config file")
    Traceback (most recent call last):
    ValueError: config file /dev/null is a device, not a regular file
    """
    try:
        mode = os.stat(check_path(path, name)).st_mode
    except FileNotFoundError:
        raise ValueError(f"{name} {path} cannot be read: it does not exist") from None
    except OSError as err:
        raise ValueError(f"{name} {path} cannot be read ({err.strerror or err})") from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode) else "a device"
        raise ValueError(f"{name} {path} is {kind}, not a regular file")


def non_finite(value, name: str) -> str | None:
    r"""Where a setting's value holds a number that is not finite (NaN or +-inf), searched through lists, tuples
    and mappings: ``"name[1]"``, ``"name.min_lr"``, ... ; None when every number in it is finite.

    >>> non_finite([1.0, float("nan")], "reward_weights"), non_finite({"min_lr": float("inf")}, "lr_scheduler_kwargs")
    ('reward_weights[1]', 'lr_scheduler_kwargs.min_lr')
    >>> non_finite([0.5, 2, True, "x", None], "w") is None
    True
    """
    if isinstance(value, float) and not math.isfinite(value):
        return name
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        found = non_finite(item, f"{name}.{key}" if isinstance(value, dict) else f"{name}[{key}]")
        if found:
            return found
    return None
