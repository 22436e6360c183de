"""A bundle's stored values: example inputs, parameters and expected outputs, memory-mapped
read-only from the tensor files `load()` opened (`Bundle` has these methods)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from .._format import _dtypes
from .._format._errors import InputError
from .._format._fields import static_shape, unflatten

if TYPE_CHECKING:
    import numpy as np

    from .._bundle_io._tensors import TensorFile
    from .._format._manifest import Argument, Manifest, Result, TensorRef


class StoredValues:
    """The stored-value methods of `Bundle`, over its selected function's manifest."""

    manifest: Manifest
    _tensor_files: dict[str, TensorFile]
    _device_values: dict[tuple[str, str], Any]  # verified onto a device (`load(device=...)`)

    @property
    def arguments(self) -> list[Argument]:
        return self.manifest.arguments

    @property
    def results(self) -> list[Result]:
        return self.manifest.results

    @property
    def has_example_inputs(self) -> bool:
        return all(a.value is not None for a in self.arguments)

    def tensor(self, name: str, *, layout: Literal["stored", "producer"] = "stored") -> np.ndarray:
        """An argument's stored example value, memory-mapped and read-only.

        With `layout="producer"`, a column-major argument comes back axis-reversed (Julia's
        orientation) as a view, without a copy.
        """
        try:
            arg = self.manifest.argument(name)
        except KeyError:
            names = [a.name for a in self.arguments]
            raise InputError(
                f"no argument named {name!r}; the arguments are {names[:20]}", argument=name
            ) from None
        if arg.value is None:
            raise InputError(f"argument {name!r} has no stored example value", argument=name)
        array = self._array(arg.value, arg.dtype, arg.shape)
        return array.T if layout == "producer" and arg.layout == "column_major" else array

    def example_inputs(self) -> dict[str, np.ndarray]:
        """Every stored argument value by name, in `@main` order (stored orientation)."""
        return {a.name: self.tensor(a.name) for a in self.arguments if a.value is not None}

    def parameters(self) -> dict[str, np.ndarray]:
        """The stored values of the parameter and state arguments (role other than `input`),
        by name, in `@main` order: what a call leaves out, it takes from here."""
        return {
            a.name: self.tensor(a.name)
            for a in self.arguments
            if a.role != "input" and a.value is not None
        }

    def example_args(self) -> tuple[Any, ...]:
        """The stored example inputs as the positional arguments the function was exported
        with: the pytrees of `input_tree` when the manifest records it, else one array per
        argument. `bundle.function()(*bundle.example_args())` runs the stored example."""
        inputs = self.example_inputs()
        missing = [a.name for a in self.arguments if a.name not in inputs]
        if missing:
            raise InputError(
                f"no stored example value for argument(s) {missing[:20]}: the bundle was "
                f"written without example inputs. Call the function on arrays of your own "
                f"({self._described(missing)}), e.g. bundle.function()({missing[0]}=...), "
                "which takes stored parameters left out; or `hlobundle run BUNDLE`, which "
                "invents inputs of these shapes and dtypes and runs on them",
                argument=missing[0],
            )
        tree = self.manifest.input_tree
        return tuple(inputs.values()) if tree is None else unflatten(tree, inputs)

    def _described(self, names: list[str]) -> str:
        """`name dtype[shape]` of the first few of `names`."""
        named = set(names)
        shown = [f"{a.name} {a.dtype}{list(a.shape)}" for a in self.arguments if a.name in named]
        return ", ".join(shown[:5]) + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")

    def expected_outputs(self) -> dict[str, np.ndarray]:
        """Every stored expected result by name (stored orientation)."""
        return {
            r.name: self._array(r.expected, r.dtype, r.shape) for r in self.results if r.expected
        }

    def _array(self, ref: TensorRef, dtype: str, shape: list[int | str]) -> np.ndarray:
        tf = self._tensor_files[ref.file]
        row = _dtypes.BY_NAME[dtype]
        held = self._device_values.get((ref.file, ref.key))
        if held is not None and held.dtype == row.numpy:  # the verified bytes, on the device
            return held
        if any(isinstance(d, str) for d in shape):  # symbolic: the stored instance's shape
            return tf.array(ref.key, row, row.logical_shape(tf.entries[ref.key].shape))
        return tf.array(ref.key, row, static_shape(shape))
