"""The program: every parsed file of a run, the flows built from them, and name resolution across files."""

from __future__ import annotations

import copy
import dataclasses
import re
from collections import Counter
from pathlib import Path
from typing import Iterator, Sequence

import libcst as cst

from fsdplint import distributed
from fsdplint.model import conditions
from fsdplint.model.events import ASSIGN, CALL, CALL_VALUE, METHOD, SHARD, WRAP, Event
from fsdplint.model.constructors import attributes_of_every_object, kept_by_base_constructor, stored_attributes
from fsdplint.model.files import FileModel, FunctionInfo, UnparsedFile
from fsdplint.model.names import dotted_name
from fsdplint.model.flow import Flow
from fsdplint.model.summaries import Summary
from fsdplint.model.syntax import bound_names, declared_global, is_whole_statement, nodes_under, runs_exec_in_scope, statements_of, string_value
from fsdplint.model.values import Ref, Value
from fsdplint.model.walker import CHARACTERS_PER_STEP, PROGRAM_BUDGET, BudgetExhausted, Walker
from fsdplint.plan import is_module


class Program:
    """Every parsed file of the run and the flows built from them."""

    def __init__(self, files: Sequence[FileModel | UnparsedFile], callees: Sequence[UnparsedFile] = ()) -> None:
        """Analysis starts at `files`, parsed (an UnparsedFile) when the run's budget reaches them: a
        file the budget never reaches is never parsed (`unanalyzed`). `callees`: the files the plan found
        a start may call into, parsed when a name they define is first looked up (`functions_named`,
        `class_of`) or a word they hold is asked for (`files_with`); their functions are walked where
        called, and get a flow of their own only when a rule asks for one (`flow_of`, `flows_named`)."""
        self.files: list[FileModel] = [file for file in files if isinstance(file, FileModel)]  # the parsed files
        self.unanalyzed: list[UnparsedFile] = []  # starts the budget never reached: no flows, parsed only if a lookup needs them
        # Expressions evaluated and characters parsed (CHARACTERS_PER_STEP to a step) left to the run.
        self.steps_left = PROGRAM_BUDGET
        self.last_call_id = 0  # each inlined call's own id, for the names of its variables (`save@12:state`)
        self.summaries: dict[tuple, list[Summary]] = {}  # by calling context (summaries.Context.key)
        self._functions_by_name: dict[str, list[FunctionInfo]] = {}
        self._classes_by_name: dict[str, list[FileModel]] = {}  # by qualified name in their file
        # The files not parsed yet, starts included: a start the budget has not reached yet is parsed
        # when a name it defines is looked up, as a callee file is.
        waiting = [file for file in files if isinstance(file, UnparsedFile)] + list(callees)
        self._unparsed = {id(unparsed): unparsed for unparsed in waiting}
        self._unparsed_by_name: dict[str, list[UnparsedFile]] = {}
        for unparsed in waiting:
            for name in unparsed.defines:
                self._unparsed_by_name.setdefault(name, []).append(unparsed)
        self._bound_counts: dict[int, tuple[cst.CSTNode, Counter[str]]] = {}
        self._module_globals: dict[int, tuple[FileModel, dict[str, cst.BaseExpression]]] = {}
        self._resolved: dict[tuple[int, int, int], tuple[cst.CSTNode, FunctionInfo | None]] = {}
        self._modules_defined: dict[str, bool] = {}  # may_define_module, by module
        self._walked_by_callers: set[int] = set()  # functions (node ids) whose bodies some function's flow followed
        # Modules a class shards on `self` in any of its methods, and the modules its `__init__` keeps
        # sharded in attributes of `self`, for its other methods: known once every flow is built (a walk
        # that asks before, `isinstance(self.model, FSDPModule)`, finds none).
        self.class_shards: dict[tuple[str, str], list[Event]] = {}
        self.class_registrations: dict[tuple[str, str], set[tuple[Ref, str]]] = {}  # ... and the forward methods it registers on `self.x`
        self.constructor_attributes: dict[tuple[int, str, bool, bool, bool], tuple] = {}  # constructors.stored_attributes, by class and purpose
        self.constructor_guards: dict[tuple[int, str], tuple] = {}  # Walker.constructor_facts, by class (its file kept)
        for file in self.files:
            self._index(file)
        # The run's budget goes first to the files that mention FSDP, whose flows rules report on most;
        # in each of the two, functions (each file's last first) before module bodies.
        function_flows: list[tuple[tuple[int, int], Flow]] = []  # with the positions of the file among `files` and of the function in it
        module_flows: list[tuple[int, Flow]] = []
        for tier in (True, False):
            started: list[tuple[int, FileModel]] = []
            for position, start in enumerate(files):
                if _mentions_fsdp(start.source.text) is not tier:
                    continue
                if isinstance(start, UnparsedFile):
                    if id(start) in self._unparsed and self.steps_left <= 0:
                        self.unanalyzed.append(start)
                        continue
                    self._parse(start)  # unless a lookup has
                    parsed = start.load()
                    if parsed is None:
                        continue
                    start = parsed
                started.append((position, start))
                # Last function first: a function another function's flow has walked where it calls it is
                # analyzed there, in what each caller gives it, and gets no flow of its own (most
                # helpers are defined above the functions that call them).
                for order, function in reversed(list(enumerate(start.functions.values()))):
                    if id(function.node) not in self._walked_by_callers:
                        function_flows.append(((position, order), self._build_flow(start, function)))
            module_flows += [(position, self._build_flow(start, None)) for position, start in started]
        self.summaries.clear()  # only walks use them
        # In the files' order, functions before module bodies: when two flows report one node, the first
        # (and shortest "via" chain) is kept.
        self.flows = [flow for _, flow in sorted(function_flows, key=lambda pair: pair[0])] + \
            [flow for _, flow in sorted(module_flows, key=lambda pair: pair[0])]
        own_walks: dict[tuple[str, str], list[Event]] = {}
        for flow in self.flows:
            function = flow.function
            if function and function.class_name:
                key = (flow.file.module_name, function.class_name)
                events = list(flow.shard_events())
                if function.name == "__init__":
                    events = [_named_by_attributes(self, flow, event) for event in events] + _kept_in_attributes(self, flow)
                in_self = [event for event in events if any(target.root == "self" for target in event.targets)]
                # A method only other methods of its class call is read in their flows, under the tests
                # around the calls (R3-v2's `_wrap_fsdp`, called by `__init__` under `if backend == "fsdp":`),
                # where they name its module as it does; its own walk, where they do not.
                walked_by_its_class = bool(function.callers) and all(
                    caller is not None and caller.owner == function.owner for caller in function.callers.values())
                (own_walks if walked_by_its_class else self.class_shards).setdefault(key, []).extend(in_self)
                registered = {(ref, name) for ref, name in flow.forward_methods_registered() if ref.root == "self"}
                if registered:
                    self.class_registrations.setdefault(key, set()).update(registered)
        for key, events in own_walks.items():
            read_in_callers = {id(event.node) for event in self.class_shards.get(key, ())}
            self.class_shards.setdefault(key, []).extend(event for event in events if id(event.node) not in read_in_callers)
        self._flows_by_function = {id(flow.function.node): flow for flow in self.flows if flow.function is not None}

    def _build_flow(self, file: FileModel, function: FunctionInfo | None) -> Flow:
        flow = Flow(self, file, function)
        if self.steps_left <= 0:
            flow.skipped = flow.exhausted = True  # the run's budget is spent: unknown, as past a flow's own budget
            return flow
        walker = Walker(flow, file, function, env=self._own_attributes(file, function), prefix="",
                        chain=(function.name,) if function else ("<module>",), depth=0)
        if function is not None and function.class_name and function.params[:1] == ["self"] and not function.runs_at_construction():
            walker.facts = walker.constructor_facts(file, function.owner, Ref("self"))  # its object's, once built
        try:
            walker.walk_function()
            walker.finish_returns()
        except BudgetExhausted:
            self.steps_left -= flow.steps
            unknown = Flow(self, file, function)
            unknown.exhausted = True
            return unknown
        self.steps_left -= flow.steps
        if function is not None:
            self._walked_by_callers.update(flow.walked)
        flow.returned = walker.returned
        flow.done_walking()
        return flow

    def _own_attributes(self, file: FileModel, function: FunctionInfo | None) -> dict[str, Value]:
        """A method's `self.x` that every object of its class holds once built (`constructors`), for the
        flow of its own body; none for the constructor, which builds them. Only for a class that defines
        its constructor: looking one up in its bases would parse their files for every class's methods."""
        if function is None or function.name == "__init__" or function.params[:1] != ["self"] or f"{function.owner}.__init__" not in file.functions:
            return {}
        return {f"self.{attribute}": value for attribute, value in attributes_of_every_object(self, file, function.owner).items()}

    def release(self) -> None:
        """Breaks the model's reference cycles (each flow and its program, each function and its file)
        once the rules have run: what the findings do not hold is then freed by reference counting as
        soon as the run drops the program, not by a pass of the cyclic collector over every node,
        event and value (2.7 s of accelerate's 19 s). The findings' files and nodes stay."""
        for file in self.files:
            for function in file.functions.values():
                function.callers = {}  # a function its callee calls back (recursion) is a cycle of two
            file.functions = {}
        self.flows = []
        self._flows_by_function = {}
        self.class_shards = {}
        self.class_registrations = {}
        self.constructor_attributes = {}
        self.constructor_guards = {}
        self.summaries.clear()
        self._functions_by_name = {}
        self._resolved = {}

    def flow_of(self, function: FunctionInfo) -> Flow:
        """The flow of `function`'s own body (of a callee file's function, built when first asked)."""
        flow = self._flows_by_function.get(id(function.node))
        if flow is None:
            flow = self._flows_by_function[id(function.node)] = self._build_flow(function.file, function)
        return flow

    def flows_named(self, name: str, mentioning: str | None = None) -> list[Flow]:
        """The flows of the run's functions called `name` (methods included), as `flow_of` gives them;
        only those of files whose text holds `mentioning`, when given (what a function must name to do
        what the rule asks about: only those files are parsed for it)."""
        for unparsed in self._unparsed_by_name.get(name, ()) if mentioning is not None else ():
            if mentioning in unparsed.source.text:
                self._parse(unparsed)
        functions = self.functions_named(name) if mentioning is None else self._functions_by_name.get(name, [])
        return [self.flow_of(function) for function in functions if mentioning is None or mentioning in function.file.source.text]

    def may_define_property(self, name: str) -> bool:
        """Whether a file of the run may define a property `name`: a parsed one does, or the text of one
        not parsed yet has `@property` over a `def` of that name. An attribute read (`policy.enabled`)
        may be one only then."""
        if any(function.decorated_by("property") for function in self._functions_by_name.get(name, ())):
            return True
        getter = re.compile(rf"@property\s+(?:@[^\n]*\s+)*def\s+{re.escape(name)}\b")
        return any(getter.search(unparsed.source.text) for unparsed in self._unparsed_by_name.get(name, ()))

    def functions_named(self, name: str) -> list[FunctionInfo]:
        """The run's functions called `name` (methods included), parsing the callee files that may define one."""
        self._parse_defining(name)
        return self._functions_by_name.get(name, [])

    def methods_named(self, class_name: str, method: str) -> list[FunctionInfo]:
        """The run's methods `class_name.method`, parsing the callee files that may define one; none
        where another file of the run defines a class (or may: any name) of that name, with or without
        the method: the call may build that one (OneScience's `ERA5Datapipe` of `era5.py`, beside
        `era5_old.py`'s, which alone defines `train_dataloader`)."""
        for unparsed in self._unparsed_by_name.get(method, ()):
            if class_name in unparsed.defines:
                self._parse(unparsed)
        if len(self._classes_by_name.get(class_name, ())) > 1 or any(id(unparsed) in self._unparsed for unparsed in self._unparsed_by_name.get(class_name, ())):
            return []
        return [function for function in self._functions_by_name.get(method, ()) if function.qualname == f"{class_name}.{method}"]

    def files_with(self, word: str) -> list[FileModel]:
        """The run's files whose text holds `word`, parsing the callee files that do."""
        for unparsed in [unparsed for unparsed in self._unparsed.values() if word in unparsed.source.text]:
            self._parse(unparsed)
        return [file for file in self.files if word in file.source.text]

    def may_read_global(self, file: FileModel, name: str, binding: cst.CSTNode) -> bool:
        """Whether code of the run may read the global `name` that statement `binding` of `file`'s
        module binds: the file's code names it outside that statement (a name, not a word of a comment
        or a string: OST-OpenSourceTransformers' unused `fp16` policy), or another file of the run holds
        both the word and its module's name (an import of it, `from training import fp16`)."""
        if sum(node.value == name for node in nodes_under(file.module, cst.Name)) > sum(node.value == name for node in nodes_under(binding, cst.Name)):
            return True
        word, module = re.compile(rf"\b{re.escape(name)}\b"), re.compile(rf"\b{re.escape(file.module_name.rsplit('.', 1)[-1])}\b")
        others = [other.source for other in self.files if other is not file] + [unparsed.source for unparsed in self._unparsed.values()]
        return any(word.search(source.text) and module.search(source.text) for source in others)

    def files_assigning(self, attribute: str) -> list[FileModel]:
        """The run's files whose text may assign `attribute` of an object (`x.attribute = ...`: what
        `FileModel.attribute_types` records), parsing the callee files that may."""
        assignment = re.compile(rf"\.\s*{re.escape(attribute)}\s*=(?!=)")
        for unparsed in [unparsed for unparsed in self._unparsed.values() if assignment.search(unparsed.source.text)]:
            self._parse(unparsed)
        return [file for file in self.files if attribute in file.attribute_types]

    def _parse_defining(self, name: str) -> None:
        for unparsed in self._unparsed_by_name.pop(name, ()):
            self._parse(unparsed)

    def _parse_candidates(self, name: str, module: str) -> None:
        """Parses the callee files `_lookup_qualified` may pick for `module.name`: those of that module
        (or of the package it names) defining it at top level, or else the only file of the run that does."""
        waiting = [unparsed for unparsed in self._unparsed_by_name.get(name, ()) if id(unparsed) in self._unparsed and name in unparsed.top_level]
        if not waiting:
            return
        same_module = [unparsed for unparsed in waiting if _may_define(unparsed.module_name, module)
                       or "." in module and unparsed.module_name.startswith(module + ".")]
        parsed = [function for function in self._functions_by_name.get(name, ()) if function.qualname == name]
        for unparsed in same_module or (waiting if len(waiting) + len(parsed) == 1 else ()):
            self._parse(unparsed)

    def _parse(self, unparsed: UnparsedFile) -> None:
        if self._unparsed.pop(id(unparsed), None) is None:
            return  # parsed already, under another of its names
        file = unparsed.load()
        self.steps_left -= len(unparsed.source.text) // CHARACTERS_PER_STEP
        if file is not None:
            self.files.append(file)
            self._index(file)

    def _index(self, file: FileModel) -> None:
        for function in file.functions.values():
            self._functions_by_name.setdefault(function.name, []).append(function)
        for qualname in file.classes:
            self._classes_by_name.setdefault(qualname, []).append(file)

    @property
    def exhausted_flows(self) -> list[Flow]:
        """Flows past their own budget."""
        return [flow for flow in self.flows if flow.exhausted and not flow.skipped]

    @property
    def skipped_flows(self) -> list[Flow]:
        """Flows not built: the run's budget was spent before them."""
        return [flow for flow in self.flows if flow.skipped]

    def only(self, file: FileModel) -> Program:
        """This program seen from one file: its flows only (callees from other files stay inlined)."""
        view = copy.copy(self)
        view.files = [file]
        view.flows = [flow for flow in self.flows if flow.file is file]
        return view

    def next_call_id(self) -> int:
        self.last_call_id += 1
        return self.last_call_id

    def reserve_call_ids(self, count: int) -> None:
        """Takes the ids a copied walk's calls have (summaries), as its first walk took them."""
        self.last_call_id += count

    def bound_counts(self, file: FileModel, function: FunctionInfo | None) -> Counter[str]:
        """How many statements of the function (or module) body bind each name, counted once per body."""
        owner = function.node if function else file.module
        if id(owner) not in self._bound_counts:
            body = list(statements_of(owner.body if function else owner))
            counts = Counter(bound_names(body))
            if function is None and runs_exec_in_scope(body):
                counts.update(counts.keys())  # `exec(open("configurator.py").read())`: any global may be set again
            self._bound_counts[id(owner)] = (owner, counts)  # the node kept: its id stays its own
        return self._bound_counts[id(owner)][1]

    def may_define_module(self, module: str) -> bool:
        """A file of the run may be the module an import names (`_may_define`): a relative import's
        always is."""
        if module.startswith(".") or not module:
            return True
        if module not in self._modules_defined:
            names = [file.module_name for file in self.files] + [unparsed.module_name for unparsed in self._unparsed.values()]
            self._modules_defined[module] = any(_may_define(name, module) for name in names)
        return self._modules_defined[module]

    def module_global(self, file: FileModel, name: str) -> cst.BaseExpression | None:
        """The expression the module binds `name` to, where it binds it once, in an assignment of its
        top level, and no function of the file declares it `global` (and could bind it again)."""
        if id(file) not in self._module_globals:
            counts = self.bound_counts(file, None)
            declared = {name for function in file.functions.values() for name in declared_global(statements_of(function.node.body))}
            bound = {}
            for statement in file.module.body:
                if type(statement) is cst.SimpleStatementLine and len(statement.body) == 1 and type(assign := statement.body[0]) is cst.Assign \
                        and len(assign.targets) == 1 and type(target := assign.targets[0].target) is cst.Name \
                        and counts[target.value] == 1 and target.value not in declared:
                    bound[target.value] = assign.value
            self._module_globals[id(file)] = (file, bound)  # the file kept: its id stays its own
        return self._module_globals[id(file)][1].get(name)

    def resolve_function(self, file: FileModel, caller: FunctionInfo | None, call: cst.Call) -> FunctionInfo | None:
        """The function of this run a call reaches: nested, same class, same file, imported, or unique."""
        return self.resolve_callable(file, caller, call.func)

    def resolve_callable(self, file: FileModel, caller: FunctionInfo | None, func: cst.CSTNode) -> FunctionInfo | None:
        """The function of this run a name or attribute refers to, as `resolve_function` finds it."""
        # The same call is resolved in every flow that inlines its function: kept per node and caller.
        key = (id(func), id(caller.node) if caller else 0, id(file))
        known = self._resolved.get(key)
        if known is not None and known[0] is func:
            return known[1]
        function = self._resolve_callable(file, caller, func)
        self._resolved[key] = (func, function)
        return function

    def _resolve_callable(self, file: FileModel, caller: FunctionInfo | None, func: cst.CSTNode) -> FunctionInfo | None:
        if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
            owner = caller.owner if caller else None
            return self.method_of_class(file, owner, func.attr.value) if owner in file.classes else None
        if type(func) is cst.Name:
            name = func.value
            if caller and f"{caller.qualname}.{name}" in file.functions:
                return file.functions[f"{caller.qualname}.{name}"]
            if name in file.functions:
                return file.functions[name]
            qualified = file.imported_as(func) or self.star_imported(file, name)
            if qualified is None:
                return None
            return self._lookup_qualified(qualified, file)
        qualified = file.qualify(func)
        return self._lookup_qualified(qualified, file) if qualified else None

    def class_of(self, file: FileModel, func: cst.CSTNode, through_packages: bool = False) -> tuple[FileModel, str] | None:
        """The class of this run a name or attribute refers to (defined in `file`, or imported), as its
        file and qualified name there. With `through_packages`, also a class a package re-exports
        (`from pkg.configs import C` of pkg/configs/training.py). Not for every lookup: resolving
        re-exported classes everywhere walks their methods at every call (15 % more time and 15 more
        files parsed on DeepSpeed, 140 MB more) and changed no finding on 114 repositories; it waits
        for summaries that make following a method cheap."""
        if type(func) is cst.Name and func.value in file.classes:
            return file, func.value
        qualified = file.qualify(func) or (self.star_imported(file, func.value) if type(func) is cst.Name else None)
        return self.class_named(qualified, through_packages, importer=file)

    def star_imported(self, file: FileModel, name: str) -> str | None:
        """`module.name` where `file` takes `name` from `from module import *` of a module of this run
        (minimal_fsdp's `from minimal_fsdp.utilities import *`, then `setup_model(args)`): the one such
        module that defines it at top level, a function or a class, and exports it (in its literal
        `__all__`, or, without one, a name not starting with `_`). None where the file binds the name
        itself, where two star-imported modules may give it, or where a module's `__all__` is not a
        literal: which object the name is is then not known."""
        modules = [module for module in file.star_imports if not distributed.is_torch_name(module.lstrip("."))]
        if not modules or self.bound_counts(file, None)[name]:
            return None
        giving = []
        for module in modules:
            qualified = f"{module}.{name}"
            function = self._lookup_qualified(qualified, file)
            found = function.file if function is not None else next(iter(self.class_named(qualified, importer=file) or ()), None)
            if found is not None and is_module(found.module_name, module.lstrip(".")):
                exported = self._exports(found, name)
                if exported is None:
                    return None
                if exported:
                    giving.append(qualified)
        return giving[0] if len(giving) == 1 else None

    def _exports(self, file: FileModel, name: str) -> bool | None:
        """`from module import *` of `file` binds `name`: it is in the module's `__all__`, a literal list
        or tuple of strings, or, where there is none, it does not start with `_`; None where `__all__`
        is not such a literal bound once."""
        if not self.bound_counts(file, None)["__all__"]:
            return not name.startswith("_")
        listed = self.module_global(file, "__all__")
        if type(listed) not in (cst.List, cst.Tuple) or any(type(element.value) is not cst.SimpleString for element in listed.elements):
            return None
        return name in {string_value(element.value) for element in listed.elements}

    def constructor_flow(self, file: FileModel, qualname: str) -> Flow | None:
        """The flow of the `__init__` objects of the class run (its own or a base's), None without one."""
        init = self.method_of_class(file, qualname, "__init__")
        return self.flow_of(init) if init is not None and init.params else None

    def class_built_by_call(self, file: FileModel, func: cst.CSTNode, through_packages: bool = False) -> tuple[FileModel, str] | None:
        """The class of this run whose object a call of `func` written in `file` builds: the class it
        names (`class_of`, with `through_packages` as there), or the class whose classmethod it is where
        that returns an object of its class (`GPT.from_pretrained(...)`)."""
        found = self.class_of(file, func, through_packages)
        if found is None and type(func) is cst.Attribute:
            owner = self.class_of(file, func.value, through_packages)
            factory = owner[0].functions.get(f"{owner[1]}.{func.attr.value}") if owner is not None else None
            found = owner if factory is not None and factory.returns_its_class() else None
        return found

    def class_built_by_event(self, event: Event | None, through_packages: bool = False) -> tuple[FileModel, str] | None:
        """The class of this run whose object the call `event` builds: the one a constructor or factory
        call names (`class_built_by_call`, with `through_packages` as there), or, for `cls(cfg)` in a
        class method the walk called on a class of its file, that class. None for an event that builds
        no object (`Event.may_construct`)."""
        if event is None or not event.may_construct():
            return None
        target = event.targets[0] if event.kind == CALL_VALUE and len(event.targets) == 1 else None
        if target is not None and not target.path and target.root in event.file.classes:
            return event.file, target.root
        return self.class_built_by_call(event.file, event.node.func, through_packages)

    def class_named(self, qualified: str | None, through_packages: bool = False, importer: FileModel | None = None) -> tuple[FileModel, str] | None:
        """The class of this run a qualified name names (`class_of`), as `importer`, the file that wrote
        the name, imports it where two classes of the run fit it."""
        if not qualified or distributed.is_torch_name(qualified):
            return None
        module, _, name = qualified.rpartition(".")
        module = module.lstrip(".")
        for unparsed in self._unparsed_by_name.get(name, ()):
            if is_module(unparsed.module_name, module) or through_packages and _inside_package(unparsed.module_name, module):
                self._parse(unparsed)
        classes = self._classes_by_name.get(name, ())
        found = [(other, name) for other in classes if is_module(other.module_name, module)]
        if not found and through_packages:
            found = [(other, name) for other in classes if _inside_package(other.module_name, module)]
        if len(found) > 1 and importer is not None:
            # Two projects of one repository, each with its own `configs` package (UNITES-Lab/MoE-RBench):
            # an import finds the one under a folder on the importer's path.
            searched = _searched_folders(importer)
            found = [entry for entry in found if _root_folder(entry[0]) in searched]
        return found[0] if len(found) == 1 else None

    def class_lineage(self, file: FileModel, qualname: str, through_packages: bool = False) -> Iterator[tuple[FileModel, str] | str | None]:
        """The class, then what it derives from, depth first (Python's method order for single
        inheritance), each once: a class of the run as its file and qualified name there, any other base
        as its qualified name (`torch.nn.Module`; None where the import does not say). A class's bases
        are looked up only when the one after it is asked for; with `through_packages`, also those a
        package re-exports (`class_of`)."""
        pending: list[tuple[FileModel, str] | str | None] = [(file, qualname)]
        seen: set[tuple[int, str]] = set()
        while pending:
            entry = pending.pop(0)
            if isinstance(entry, tuple):
                if (id(entry[0]), entry[1]) in seen:
                    continue
                seen.add((id(entry[0]), entry[1]))
            yield entry
            if isinstance(entry, tuple):
                file, qualname = entry
                pending[:0] = [self.class_of(file, base.value, through_packages) or file.qualify(base.value) for base in file.classes[qualname].bases]

    def method_of_class(self, file: FileModel, qualname: str, method: str) -> FunctionInfo | None:
        """`qualname.method`, defined by the class or inherited from the first class of the run in its
        lineage that defines it."""
        for entry in self.class_lineage(file, qualname):
            function = entry[0].functions.get(f"{entry[1]}.{method}") if isinstance(entry, tuple) else None
            if function is not None:
                return function
        return None

    def is_module_class(self, file: FileModel, qualname: str) -> bool | None:
        """The class derives from `nn.Module`, through the run's classes; None where a base is none of them."""
        for entry in self.class_lineage(file, qualname):
            if entry == "torch.nn.Module":
                return True
            if not isinstance(entry, tuple):
                return None
        return False

    def _lookup_qualified(self, qualified: str, importer: FileModel) -> FunctionInfo | None:
        if distributed.is_torch_name(qualified):
            return None  # torch's own (`torch.distributed.get_rank`), never a function of the checked files
        module, _, name = qualified.rpartition(".")
        relative = module.startswith(".")
        module = module.lstrip(".")
        self._parse_candidates(name, module)
        candidates = [f for f in self._functions_by_name.get(name, ()) if f.qualname == name]
        # A package the import names by its dotted path: the module itself, or a module of that package
        # (re-exported by its `__init__`), before a module that only ends in the same name: `from
        # physicsnemo.utils import save_checkpoint` is not an example script's `utils.py`. (A bare `from
        # utils import f` in a script is the `utils.py` beside it, below.)
        inside = [f for f in candidates if f.file.module_name == module or f.file.module_name.startswith(module + ".")] if "." in module else []
        if len(inside) == 1:
            return inside[0]
        same_module = [f for f in candidates if _may_define(f.file.module_name, module)]
        if len(same_module) > 1:
            # Two scripts' folders each with a `tp.py` (gpt-fast): a script imports the one on its path.
            searched = _searched_folders(importer)
            same_module = [f for f in same_module if _root_folder(f.file) in searched] or same_module
        if len(same_module) == 1:
            return same_module[0]
        if len(candidates) != 1:
            return None
        # The only function of that name, re-exported by a package (`from mypkg import f`, defined in
        # mypkg/core.py): only where the import names one of its folders. `from setuptools import
        # setup` in setup.py is not fms-fsdp's own `setup()`, which starts a process group.
        (candidate,) = candidates
        return candidate if relative or module.split(".")[0] in Path(candidate.file.source.path).resolve().parts else None


def _named_by_attributes(program: Program, init: Flow, event: Event) -> Event:
    """`event` of `__init__`, its tests on a parameter's object (`config.backend`) named as the other
    methods reach that object: by the attribute the constructor keeps it in, and assigns nowhere else
    (`self.config.backend`), so that their tests and these can exclude each other."""
    stored = stored_attributes(program, init.file, init.function.owner)[1]
    kept = {held.parameter: attribute for attribute, held in stored.items() if held.parameter is not None}
    if not kept:
        return event

    def named(ref: Ref) -> Ref:
        return Ref("self", (kept[ref.root], *ref.path)) if ref.root in kept else ref

    facts = tuple((conditions.mapped(formula, named), truth) for formula, truth in event.facts)
    return dataclasses.replace(event, facts=facts) if facts != event.facts else event


def _kept_in_attributes(program: Program, init: Flow) -> list[Event]:
    """`self.model = FSDP(model, ...)` (or `fully_shard`'s result, or a module sharded or wrapped
    before or after the attribute kept it: `fully_shard(model); self.model = model`, `self.model = m;
    self.fsdp_model = FSDP(self.model)`) in `__init__`, or the same given to a base's
    constructor that keeps it (`super().__init__(model)`), on every path through it, on every rank, and
    the last value `__init__` gives that attribute: every other method runs after it, with that module
    at `self.model`. Each such wrap, with the attribute among its targets."""
    last: dict[Ref, tuple[Event, Value | None]] = {}  # each attribute: what gave it its value, and the value
    for given in init.of_kind(ASSIGN, CALL, METHOD):
        if given.kind is ASSIGN:
            # By the target as written: a ref of `self.model` once bound is the module it was bound to.
            written = dotted_name(given.node) or ""
            if written.count(".") == 1 and written.startswith("self."):
                last[Ref("self", (written[len("self."):],))] = given, given.value
        elif type(given.node) is cst.Call and type(given.node.func) is cst.Attribute and given.node.func.attr.value == "__init__":
            kept = kept_by_base_constructor(program, init.function, given.node, given.args, given.kwargs)
            for attribute, value in kept.items():
                last[Ref("self", (attribute,))] = given, value
    kept, shards = [], list(init.of_kind(SHARD, WRAP))
    for attribute, (given, value) in last.items():
        made = value.event if value is not None else None
        if made is None and value is not None and value.ref is not None and not value.ref.path:
            # The object the attribute holds, sharded in place before it was kept there or after (its
            # methods run once `__init__` returns): `self.model = build(); self.fsdp_model = FSDP(self.model)`
            # (Yinita/UnstableBaselines, where `build` returns its local variable) leaves `self.model` wrapped.
            made = next((shard for shard in reversed(shards) if value.ref in shard.targets and is_whole_statement(shard.statement, shard.node)), None)
        if made is not None and made.kind in (SHARD, WRAP) and not (given.arms or given.rank_guards or made.arms or made.rank_guards):
            kept.append(dataclasses.replace(made, targets=made.targets + (attribute,)))
    return kept


def _mentions_fsdp(text: str) -> bool:
    return any(token in text for token in distributed.FSDP_TOKENS)


def _inside_package(module_name: str, module: str) -> bool:
    """The module `module_name` is in the package an import names (`from physicsnemo.utils import f`
    for `physicsnemo.utils.io`; `from src.configs import c` for `configs.training` where `src` has no
    `__init__.py`, as `is_module` reads a module). A name of one part names a top-level package, as
    found beside the script: `from configs import c` for `configs.training`, never for
    `other.configs.training`, a package that only ends in that name."""
    package = module_name.rpartition(".")[0]
    if "." not in module:
        return package == module or package.startswith(module + ".")
    return bool(package) and (is_module(package, module) or _inside_package(package, module))


def _root_folder(file: FileModel) -> Path:
    """The folder a file's module name is counted from: the one above its outermost package."""
    path = Path(file.source.path).resolve()
    return path.parents[file.module_name.count(".") + (path.stem == "__init__")]


def _searched_folders(importer: FileModel) -> set[Path]:
    """The folders an import in `importer` may look in first: its own (a script run as
    `python path/script.py`) and the one its module name is counted from (the project's root)."""
    return {Path(importer.source.path).resolve().parent, _root_folder(importer)}


def _may_define(module_name: str, module: str) -> bool:
    """A function imported from `module` may be defined in the module `module_name`: it is that module,
    or the two end in the same name (`from utils import f` for `pkg/utils.py`)."""
    return is_module(module_name, module) or bool(module) and module_name.split(".")[-1] == module.split(".")[-1]
