"""Finds the uses of private Keras, TensorFlow and tf.text symbols in a module's source, for
tests/test_architecture.py: they belong in bert_keras/compat.py, whose self-check
(tests/compat_check.py) sees that each still takes effect.

A use is an import of a private module (`keras.src`, `tensorflow.python`, a `_name`
component); an attribute `_name` (single or double leading underscore, not a dunder; and
`__internal__`) reached from a name imported from those packages (`tf._x`, `keras.layers._x`);
and a private attribute that Keras or TensorFlow classes define, on `self`, `super()` or
any other object: the privates of the Keras and TensorFlow classes each class of the module
derives from (their methods and what their source sets on `self`), and for other objects
those of the classes the library's objects derive from (models, layers, optimizers,
callbacks, ...), which also bind a mixin (a class with no such base that calls one of them
through `super()`). A class's own private attributes are its own business.
"""

import ast
import functools
import importlib
import inspect
import textwrap

import keras
import tensorflow as tf

PACKAGES = ("keras", "tensorflow", "tensorflow_text", "tf_keras")
PRIVATE_MODULES = {"keras": "src", "tensorflow": "python", "tensorflow_text": "python"}
# The classes whose private names no object outside compat may use.
COMMON_BASES = (
    keras.Model,
    keras.layers.Layer,
    keras.optimizers.Optimizer,
    keras.callbacks.Callback,
    keras.callbacks.TensorBoard,
    keras.losses.Loss,
    keras.metrics.Metric,
    keras.Variable,
    tf.Module,
    tf.data.Dataset,
    tf.distribute.Strategy,
)
ATTRIBUTE_FUNCTIONS = ("getattr", "hasattr", "setattr", "delattr")


def is_private(name):
    return name == "__internal__" or (name.startswith("_") and not (name.startswith("__") and name.endswith("__")))


def private_module(dotted):
    root, *rest = dotted.split(".")
    return root in PACKAGES and (PRIVATE_MODULES.get(root) in rest[:1] or any(is_private(part) for part in rest))


@functools.cache
def class_privates(cls):
    """The private names a Keras or TensorFlow class and its bases define or set on `self`."""
    names = set()
    for base in cls.__mro__:
        if base.__module__.split(".")[0] not in PACKAGES:
            continue
        names |= {name for name in vars(base) if is_private(name)}
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(base)))
        except (OSError, TypeError, SyntaxError):
            continue
        names |= {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and is_private(node.attr)
        }
    return frozenset(names)


@functools.cache
def common_privates():
    return frozenset().union(*(class_privates(cls) for cls in COMMON_BASES))


def private_uses(source, name="<source>"):
    """`name:line: what` for each private use in `source`."""
    tree = ast.parse(source)
    finder = _Finder(name, _imports(tree), {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)})
    finder.visit(tree)
    return finder.found


def _imports(tree):
    """Each imported name -> the dotted name of what it is (`tf` -> "tensorflow")."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _is_super(node):
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _load(dotted):
    """The object a dotted name names, importing its modules, or None."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            return functools.reduce(getattr, parts[split:], value)
        except AttributeError:
            return None
    return None


class _Finder(ast.NodeVisitor):
    def __init__(self, name, imports, classes):
        self.name, self.imports, self.classes = name, imports, classes
        self.found, self.inherited = [], [frozenset()]

    def report(self, node, what):
        self.found.append(f"{self.name}:{node.lineno}: {what}")

    def external(self, dotted):
        root, *rest = dotted.split(".")
        return self.imports[root] if root in self.imports and self.imports[root].split(".")[0] in PACKAGES else None

    def base_privates(self, node, seen=()):
        """The Keras/TensorFlow private names a class of this module inherits."""
        names = set()
        for base in node.bases:
            dotted = _dotted(base)
            if dotted is None:
                continue
            root, *rest = dotted.split(".")
            if not rest and root in self.classes and root not in seen:
                names |= self.base_privates(self.classes[root], (*seen, node.name))
            elif root in self.imports:
                value = _load(".".join([self.imports[root], *rest]))
                if isinstance(value, type):
                    names |= class_privates(value)
        return frozenset(names)

    def visit_Import(self, node):
        for alias in node.names:
            if private_module(alias.name):
                self.report(node, f"import {alias.name}")

    def visit_ImportFrom(self, node):
        module = node.module or ""
        if private_module(module) or any(private_module(f"{module}.{alias.name}") for alias in node.names):
            self.report(node, f"from {module} import {', '.join(alias.name for alias in node.names)}")

    def visit_ClassDef(self, node):
        """A class's methods may not override its Keras/TensorFlow bases' privates, nor a
        mixin's (a class that calls such a private through `super()`) those of the classes it
        is mixed into."""
        calls_super = any(
            isinstance(child, ast.Attribute) and child.attr in common_privates() and _is_super(child.value)
            for child in ast.walk(node)
        )
        self.inherited.append(self.base_privates(node) or (common_privates() if calls_super else frozenset()))
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and statement.name in self.inherited[-1]:
                self.report(statement, f"overrides the private {statement.name} of a Keras/TensorFlow class")
        self.generic_visit(node)
        self.inherited.pop()

    def visit_Attribute(self, node):
        if is_private(node.attr):
            self.check(node, node.value, node.attr)
        self.generic_visit(node)

    def visit_Call(self, node):
        function = node.func
        if (
            isinstance(function, ast.Name)
            and function.id in ATTRIBUTE_FUNCTIONS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and is_private(node.args[1].value)
        ):
            self.check(node, node.args[0], node.args[1].value)
        self.generic_visit(node)

    def check(self, node, value, attribute):
        dotted = _dotted(value)
        owner = dotted and self.external(dotted)
        is_self = isinstance(value, ast.Name) and value.id == "self"
        is_super = _is_super(value)
        if owner:
            self.report(node, f"{dotted}.{attribute} (private in {owner.split('.')[0]})")
        elif (is_self or is_super) and attribute in self.inherited[-1]:
            self.report(node, f"{'self' if is_self else 'super()'}.{attribute} (private in a Keras/TensorFlow class)")
        elif not (is_self or is_super) and attribute in common_privates():
            self.report(node, f"{dotted or '...'}.{attribute} (private in Keras/TensorFlow classes)")
