"""The semantic model's own facts, asked of the model directly (tests/test_model.py asks them through
the rules): which events a flow holds, which exclude each other, what a name is bound to."""

from __future__ import annotations

import gc
import textwrap
import weakref
from pathlib import Path

import libcst as cst
import pytest

from fsdplint import model
from fsdplint.model.conditions import render
from fsdplint.plan import make_plan
from fsdplint.source import SourceFile


def program_of(source: str, name: str = "train.py") -> model.Program:
    text = textwrap.dedent(source)
    file = model.build_file_model(SourceFile(Path(name), name, text, "utf-8", False), cst.parse_module(text))
    return model.Program([file])


def parser_of(texts: dict[str, str]):
    """SourceFiles of `texts` by name, a parser of them into FileModels, and the names it parsed, in order."""
    sources = {name: SourceFile(Path(name), name, text, "utf-8", False) for name, text in texts.items()}
    parsed: list[str] = []

    def parse(source):
        parsed.append(source.display)
        return model.build_file_model(source, cst.parse_module(source.text))

    return sources, parse, parsed


def program_on_disk(tmp_path: Path, texts: dict[str, str], start: str = "train.py") -> model.Program:
    """The program of `texts` written under `tmp_path`: analysis starts at `start`, the other files are
    parsed when a lookup needs them, as the engine gives them."""
    for name, text in texts.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    def parse(name):
        return model.build_file_model(SourceFile(tmp_path / name, name, texts[name], "utf-8", False), cst.parse_module(texts[name]))

    return model.Program([parse(start)], [model.UnparsedFile(SourceFile(tmp_path / name, name, texts[name], "utf-8", False),
                                                             lambda source: parse(source.display)) for name in texts if name != start])


def flow_of(program: model.Program, function: str | None) -> model.Flow:
    """The flow of the module body (None) or of the function's own body: a function that another
    function calls is walked in its callers' flows and gets its own only when asked for."""
    if function is None:
        return next(flow for flow in program.flows if flow.function is None)
    [info] = [info for file in program.files for info in file.functions.values() if info.qualname == function]
    return program.flow_of(info)


def test_a_flow_past_its_budget_is_unknown_not_partial():
    calls = "\n".join(f"    part{i} = middle(model)" for i in range(model.FLOW_BUDGET // 100))
    program = program_of(f"""
from torch.distributed.fsdp import fully_shard

def middle(model):
{chr(10).join(f"    x{i} = model.layer{i}" for i in range(60))}

def main(model):
{calls}
    fully_shard(model)
""")
    main = flow_of(program, "main")
    assert main.exhausted and main.events == []
    assert program.exhausted_flows == [main]
    assert not flow_of(program, "middle").exhausted


def test_analysis_starts_only_from_files_that_use_torch_distributed():
    texts = {
        # sympy's shape: a function named like a rank getter, in a package with no distributed code
        "combinatorics/perm.py": "def get_rank(self):\n    return self._rank\n",
        "combinatorics/use.py": "from combinatorics.perm import get_rank\nr = get_rank(p)\n",
        "train.py": "import torch.distributed as dist\nrank = dist.get_rank()\n",
    }
    plan = make_plan(sorted(texts), texts.__getitem__, ("get_rank",), set(), lambda path: path[:-3].replace("/", "."))
    assert plan.parsed == ["train.py"]


def test_a_file_parsed_only_for_a_function_it_defines_is_walked_where_called_not_as_a_start():
    texts = {
        "optim.py": "import torch\n\ndef build_optimizer(model):\n    return torch.optim.AdamW(model.parameters())\n\ndef unused(model):\n    model.forward(1)\n",
        "train.py": "from torch.distributed.fsdp import fully_shard\nfrom optim import build_optimizer\n\ndef main(model):\n"
                    "    optimizer = build_optimizer(model)\n    fully_shard(model)\n",
    }
    plan = make_plan(sorted(texts), texts.__getitem__, ("fully_shard",), set(), lambda path: path[:-3])
    (unit,) = plan.units
    assert unit.paths == ("optim.py", "train.py") and unit.callees == ("optim.py",)
    sources = {name: SourceFile(Path(name), name, text, "utf-8", False) for name, text in texts.items()}
    parsed: list[str] = []

    def parse(source):
        parsed.append(source.display)
        return model.build_file_model(source, cst.parse_module(source.text))

    files = {"train.py": parse(sources["train.py"])}
    program = model.Program([files["train.py"]], [model.UnparsedFile(sources["optim.py"], parse)])
    files["optim.py"] = program.files[1]
    assert parsed == ["train.py", "optim.py"]  # parsed once, when `main`'s call was resolved
    assert {flow.file.display for flow in program.flows} == {"train.py"}
    # walked where `main` calls it ...
    assert [event.function.name for event in events(flow_of(program, "main"), model.OPTIMIZER)] == ["build_optimizer"]
    # ... and a flow of its own only when asked for one, once
    unused = program.flow_of(files["optim.py"].functions["unused"])
    assert [event.method for event in events(unused, model.METHOD)] == ["forward"]
    assert program.flow_of(files["optim.py"].functions["unused"]) is unused
    assert program.flows_named("unused") == [unused]


# azton/minimal_fsdp: the module a script imports with `*` is analyzed with it, and with the entry that
# is the module of that name (`pkg/utilities.py`, not `other/tools.py`, nor torch's).
@pytest.mark.parametrize("star, callees", [
    ("from pkg.utilities import *", ("pkg/utilities.py",)),
    ("from .utilities import *", ("pkg/utilities.py",)),
    ("from torch.distributed.fsdp import *", ()),
    ("from other.tools import *", ()),
])
def test_a_module_imported_with_a_star_is_analyzed_with_its_importer(star, callees):
    texts = {
        "pkg/utilities.py": "import torch\n\ndef build(model):\n    return torch.optim.AdamW(model.parameters())\n",
        "pkg/train.py": f"from torch.distributed.fsdp import fully_shard\n{star}\n\ndef main(model):\n    build(model)\n    fully_shard(model)\n",
        "other/utils.py": "def build(model):\n    return model\n",
    }
    plan = make_plan(sorted(texts), texts.__getitem__, ("fully_shard",), set(), lambda path: path[:-3].replace("/", "."))
    (unit,) = [unit for unit in plan.units if "pkg/train.py" in unit.paths]
    assert unit.callees == callees and unit.paths == tuple(sorted((*callees, "pkg/train.py")))


def test_the_callees_of_a_module_imported_with_a_star_are_analyzed_too():
    """An entry whose only link is `from pkg.steps import *` (it names nothing else another file
    defines): the module is analyzed with it, and so is the file defining what that module calls.
    Before, the index of which file defines which name was built only where the entries named some
    name, so `pkg/helpers.py` was never read."""
    texts = {
        "pkg/helpers.py": "import torch\n\ndef build(model):\n    return torch.optim.AdamW(model.parameters())\n",
        "pkg/steps.py": "from pkg.helpers import build\n\ndef prepare(model):\n    return build(model)\n",
        "pkg/train.py": "from pkg.steps import *\n\nfully_shard(model)\nprepare(model)\n",
    }
    plan = make_plan(sorted(texts), texts.__getitem__, ("fully_shard",), set(), lambda path: path[:-3].replace("/", "."))
    (unit,) = [unit for unit in plan.units if "pkg/train.py" in unit.paths]
    assert unit.paths == ("pkg/helpers.py", "pkg/steps.py", "pkg/train.py")


def test_a_callee_file_is_parsed_only_when_a_name_it_defines_is_looked_up():
    """The plan marks `tools.py` a callee file (train.py calls its `build`); the call is behind a name
    the model cannot resolve to it, so it is never parsed, and asking for its words parses it."""
    texts = {
        "tools.py": "import torch\n\ndef build(model):\n    return torch.optim.AdamW(model.parameters())\n",
        "train.py": "from torch.distributed.fsdp import fully_shard\nimport tools\n\ndef main(model, build):\n"
                    "    fully_shard(model)\n    optimizer = build(model)\n",
    }
    sources = {name: SourceFile(Path(name), name, text, "utf-8", False) for name, text in texts.items()}
    parsed: list[str] = []

    def parse(source):
        parsed.append(source.display)
        return model.build_file_model(source, cst.parse_module(source.text))

    program = model.Program([parse(sources["train.py"])], [model.UnparsedFile(sources["tools.py"], parse)])
    assert parsed == ["train.py"] and [file.display for file in program.files] == ["train.py"]
    assert [file.display for file in program.files_with("AdamW")] == ["tools.py"]
    assert parsed == ["train.py", "tools.py"]
    assert [function.qualname for function in program.functions_named("build")] == ["build"]
    assert parsed == ["train.py", "tools.py"]  # once


def test_an_import_inside_a_function_names_what_it_imports_there_only():
    """hamstergamerszhang-ops/single-gpu-llm-toolkit's tests: `from train_cpt import main` in one test,
    `from expand_model import main` in another; each call reaches its own test's `main`. Near miss: a
    function that imports nothing itself reads the module's import (not a test's), as Python does."""
    texts = {
        "train_cpt.py": "def main():\n    pass\n",
        "expand_model.py": "def main():\n    pass\n",
        "other.py": "def main():\n    pass\n",
        "test_all.py": "from other import main\n\ndef test_train():\n    from train_cpt import main\n    main()\n\n"
                       "def test_expand():\n    from expand_model import main\n    main()\n\ndef test_other():\n    main()\n",
    }
    sources, parse, _ = parser_of(texts)

    test_file = parse(sources["test_all.py"])
    program = model.Program([test_file], [model.UnparsedFile(sources[name], parse) for name in ("train_cpt.py", "expand_model.py", "other.py")])
    reached = {}
    for name in ("test_train", "test_expand", "test_other"):
        function = test_file.functions[name]
        [call] = [statement.body[0].value for statement in function.node.body.body if type(statement.body[0]) is cst.Expr]
        reached[name] = program.resolve_function(test_file, function, call).file.display
    assert reached == {"test_train": "train_cpt.py", "test_expand": "expand_model.py", "test_other": "other.py"}


def test_a_global_may_be_read_where_a_file_of_the_run_names_it_past_its_binding():
    """A policies module's constants: `read_here` is named by a function of its file, `read_there` by
    another file of the run (not parsed for it), `unread` by no code but its own assignment: a word of
    a comment or a string of its file, or of a file that does not name its module, reads nothing
    (OST-OpenSourceTransformers' `fp16`)."""
    texts = {
        "policies.py": "read_here = 1\nread_there = 2\nunread = 3  # unread\n\ndef pick():\n    print('unread')\n    return read_here\n",
        "train.py": "from policies import read_there\n",
        "other.py": "unread = 'unread'\n",
    }
    sources, parse, parsed = parser_of(texts)
    policies = parse(sources["policies.py"])
    program = model.Program([policies], [model.UnparsedFile(sources[name], parse) for name in ("train.py", "other.py")])
    statements = {statement.body[0].targets[0].target.value: statement for statement in policies.module.body[:3]}
    assert {name: program.may_read_global(policies, name, statement) for name, statement in statements.items()} == \
        {"read_here": True, "read_there": True, "unread": False}
    assert parsed == ["policies.py"]


def test_only_files_that_may_assign_an_attribute_are_parsed_to_find_its_type():
    texts = {
        "model.py": "from torch import nn\n\nclass Net(nn.Module):\n    def __init__(self):\n        self.blocks = nn.ModuleList()\n",
        "reader.py": "def count(net):\n    return len(net.blocks)\n",
        "train.py": "from torch.distributed.fsdp import fully_shard\n\ndef main(net):\n    fully_shard(net.blocks)\n",
    }
    sources, parse, parsed = parser_of(texts)

    program = model.Program([parse(sources["train.py"])], [model.UnparsedFile(sources[name], parse) for name in ("model.py", "reader.py")])
    assert [file.display for file in program.files_assigning("blocks")] == ["model.py"]
    assert parsed == ["train.py", "model.py"]  # reader.py reads `.blocks` and assigns nothing


def events(flow: model.Flow, kind: str) -> list[model.Event]:
    return list(flow.of_kind(kind))


def test_a_rebound_name_is_a_new_value_unless_computed_from_the_old():
    flow = flow_of(program_of("""
    from torch.distributed.fsdp import fully_shard
    def main():
        model = Net()
        fully_shard(model)
        model = torch.compile(model)
        fully_shard(model)
        model = nn.Sequential(nn.Linear(2, 2))
        fully_shard(model)
    """), "main")
    first, compiled, rebuilt = (event.target for event in events(flow, model.SHARD))
    assert first == compiled and rebuilt != first
    assert rebuilt.name == "model" and rebuilt.variable != rebuilt.root


def test_exclusive_arms_of_if_elif_else_and_after_an_early_return():
    flow = flow_of(program_of("""
    from torch.distributed.fsdp import fully_shard
    def prepare(model, mode):
        if mode == "root":
            fully_shard(model.a)
        elif mode == "blocks":
            fully_shard(model.b)
        else:
            fully_shard(model.c)
        fully_shard(model.d)
        if mode == "eval":
            fully_shard(model.e)
            return
        fully_shard(model.f)
    """), "prepare")
    a, b, c, d, e, f = events(flow, model.SHARD)
    assert a.exclusive(b) and a.exclusive(c) and b.exclusive(c)
    assert not any(d.exclusive(other) for other in (a, b, c, e, f))
    assert e.exclusive(f) and f.excludes(e)


def test_match_cases_and_except_handlers_are_arms():
    flow = flow_of(program_of("""
    from torch.distributed.fsdp import fully_shard
    def prepare(model, mode):
        match mode:
            case "a":
                fully_shard(model.a)
            case _:
                fully_shard(model.b)
        try:
            fully_shard(model.c)
        except ValueError:
            fully_shard(model.d)
        except TypeError:
            fully_shard(model.e)
        else:
            fully_shard(model.f)
    """), "prepare")
    a, b, c, d, e, f = events(flow, model.SHARD)
    assert a.exclusive(b)
    assert not c.exclusive(d) and d.exclusive(e) and d.exclusive(f) and e.exclusive(f)


def test_code_past_an_arm_that_returns_never_runs_after_it_to_the_end_of_the_function():
    """RLLaVA's `dist_batch`: a handler that returns inside `if is_rank0():`; what follows the `if`
    never runs after the handler in one call. Near misses: a `finally` (it runs after the return), a
    handler that may `continue` instead, the try's body (a handler may run after any part of it), and
    another arm of an `if` that does not return (an `elif` arm is no code past a return)."""
    flow = flow_of(program_of("""
    from torch.distributed.fsdp import fully_shard
    def prepare(model, batches, first):
        if first:
            try:
                fully_shard(model.a)
            except StopIteration:
                fully_shard(model.b)
                return None
            finally:
                fully_shard(model.c)
        fully_shard(model.d)
        for batch in batches:
            try:
                fully_shard(model.e)
            except ValueError:
                fully_shard(model.f)
                if batch:
                    continue
                return None
            fully_shard(model.g)
        if first:
            fully_shard(model.h)
        elif batches:
            fully_shard(model.i)
    """), "prepare")
    a, b, c, d, e, f, g, h, i = events(flow, model.SHARD)
    assert d.runs_where_returned(b) and d.exclusive(b) and b.exclusive(d)
    assert not any(other.runs_where_returned(b) or other.exclusive(b) for other in (a, c))
    assert not any(d.runs_where_returned(other) for other in (a, c))
    assert not g.runs_where_returned(f) and not g.exclusive(f)
    assert h.exclusive(i) and not i.runs_where_returned(h) and not h.runs_where_returned(i)
    assert not any(other.exclusive(d) for other in (e, f, g, h, i))


def test_code_past_a_raise_in_its_block_never_runs():
    """relora's `if distributed_type == "fsdp": raise RuntimeError(...); model = initialize_fsdp(model)`:
    the wrap past the `raise` never runs, nor does the rest of a function that raises first. Near
    misses: a block under `pytest.raises` or `contextlib.suppress` (what follows the `with` runs; the
    functions called under `suppress` are followed, where `pytest.raises` says they raise), a
    `try` whose body raises (its handler runs), and an arm that raises (the other arm and the code
    past the `if` still run)."""
    flow = flow_of(program_of("""
    import contextlib
    import pytest
    from torch.distributed.fsdp import fully_shard
    def shard_part(model):
        fully_shard(model.s)
    def prepare(model, mode):
        if mode == "fsdp":
            raise RuntimeError("not supported")
            fully_shard(model.a)
        else:
            fully_shard(model.b)
        with pytest.raises(ValueError):
            raise ValueError("expected")
        fully_shard(model.c)
        with contextlib.suppress(KeyError):
            shard_part(model)
            raise KeyError("expected")
        fully_shard(model.d)
        try:
            raise OSError("retry")
        except OSError:
            fully_shard(model.e)
        fully_shard(model.f)
        raise SystemExit(0)
        fully_shard(model.g)
    """), "prepare")
    assert [event.target.path for event in events(flow, model.SHARD)] == [("b",), ("c",), ("s",), ("d",), ("e",), ("f",)]


@pytest.mark.parametrize("before_init, stored", [
    # SimonYRSK/G2E's trainer: `model = FSDP(model, ...)`, then `super().__init__(model, ...)`, whose
    # `self.model = model` keeps the wrap, not the module the call gave: not known, rather than wrong.
    ("model = FSDP(model)", {"opt": "opt"}),
    # Near miss: the parameter as given, kept by the base's constructor.
    ("pass", {"model": "model", "opt": "opt"}),
])
def test_a_parameter_the_constructor_rebinds_is_not_the_argument_it_keeps(before_init, stored):
    from fsdplint.model.constructors import stored_attributes

    program = program_of(f"""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    class Base:
        def __init__(self, model, opt):
            self.model = model
            self.opt = opt
    class Trainer(Base):
        def __init__(self, model, opt):
            {before_init}
            super().__init__(model, opt)
    """)
    [file] = program.files
    kept = stored_attributes(program, file, "Trainer")[1]
    assert {attribute: held.parameter for attribute, held in kept.items()} == stored


@pytest.mark.parametrize("first, then, kept", [
    ("fully_shard(model)", "self.model = model", True),  # `fully_shard` shards the module in place: the attribute holds it sharded
    ("fully_shard(model)", "Base.__init__(self, model=model)", True),  # ... given to a base's constructor that keeps it
    ("fully_shard(model)", "super().__init__(model.encoder)", False),  # near miss: a part of it, which `fully_shard` did not make a unit
    # Yinita/UnstableBaselines: kept first, wrapped after (its other methods run once `__init__` returns),
    # `build` returning its local variable; near miss: another object built by it, wrapped.
    ("self.model = build()", "self.fsdp_model = FSDP(self.model)", True),
    ("self.model = build()", "self.fsdp_model = FSDP(build())", False),
])
def test_a_module_the_constructor_shards_in_place_and_keeps_is_sharded_in_its_attribute(first, then, kept):
    program = program_of(f"""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, fully_shard
    def build():
        base = Net()
        return base
    class Base:
        def __init__(self, model):
            self.model = model
    class Trainer(Base):
        def __init__(self, model):
            {first}
            {then}
        def save(self):
            pass
    """)
    shards = program.class_shards.get(("train", "Trainer"), [])
    assert any(model.Ref("self", ("model",)) in shard.targets for shard in shards) is kept


@pytest.mark.parametrize("other_class, entered", [
    # OneScience: `from onescience.datapipes.climate import ERA5Datapipe` is `era5.py`'s class (a re-export
    # the model does not follow), which has no `train_dataloader`; `era5_old.py`'s class of the same
    # name, the one that defines it, is not the class the call builds.
    ("class Pipe:\n    def __init__(self, root):\n        self.root = root\n", []),
    # Near miss: the only class of that name in the run.
    ("", ["Pipe.loader"]),
])
def test_a_method_is_not_taken_from_a_class_of_the_same_name_where_two_classes_have_it(tmp_path, other_class, entered):
    texts = {
        "pkg/__init__.py": "from .era5 import Pipe\n",
        "pkg/era5.py": other_class or "X = 1\n",
        "pkg/era5_old.py": "class Pipe:\n    def __init__(self, distributed):\n        self.distributed = distributed\n\n"
                           "    def loader(self):\n        return None\n",
        "train.py": "import torch.distributed as dist\nfrom pkg import Pipe\n\ndef main():\n    pipe = Pipe(True)\n    pipe.loader()\n",
    }
    program = program_on_disk(tmp_path, texts)
    assert [event.qname for event in events(flow_of(program, "main"), model.ENTER)] == entered


def test_every_assignment_to_an_attribute_names_what_built_it_or_that_it_is_not_known():
    """OneScience: `self.module = module` in the data-parallel wrapper is of no known type, beside
    DualPipeV's `self.module = nn.ModuleList(...)`: the attribute's name alone says no type."""
    program = program_of("""
    import torch.nn as nn
    class DualPipeV(nn.Module):
        def __init__(self, modules):
            self.module = nn.ModuleList(modules)
            self.head: nn.Linear = nn.Linear(2, 2)
    class Wrapper(nn.Module):
        def __init__(self, module, extra):
            self.module = module
            self.tail, self.extra = nn.Linear(2, 2), extra
            self.norm: nn.Module = extra
    """)
    [file] = program.files
    assert file.attribute_types == {"module": {"ModuleList", "?"}, "head": {"Linear"}, "tail": {"?"}, "extra": {"?"}, "norm": {"?"}}


def test_a_guard_clause_that_only_raises_marks_no_code_past_it():
    """`if not ok: raise ValueError(...)`, an arm with no event but its raise's, has nothing code past
    it could be ordered against: the code past it carries no mark (accelerate's guard clauses, +2 % of
    its memory). Near miss: an arm with an event before its raise marks the code past it."""
    flow = flow_of(program_of("""
    from torch.distributed.fsdp import fully_shard
    def setup(model, ok, retry):
        if not ok:
            raise ValueError(f"not ok: {ok}")
        fully_shard(model.a)
        if retry:
            fully_shard(model.b)
            raise RuntimeError("retry")
        fully_shard(model.c)
    """), "setup")
    a, b, c = events(flow, model.SHARD)
    assert not any(type(arm) is frozenset for _, arm in a.arms)
    assert any(type(arm) is frozenset for _, arm in c.arms) and c.runs_where_returned(b) and c.exclusive(b)


def test_code_past_an_if_whose_other_arm_raises_runs_on_every_path_through_the_arm_that_does_not():
    """eva-clip-v2_4: `set_device(rank)` under `if torch.cuda.is_available():`, whose `else` raises, then
    `init_process_group` past the `if`: the init runs wherever the set_device does. Near misses: code
    before the `if` (past it, the init may not run), and code in the arm that raises."""
    flow = flow_of(program_of("""
    from torch.distributed.fsdp import fully_shard
    def setup(model, ready):
        fully_shard(model.before)
        if ready:
            fully_shard(model.set_device)
        else:
            fully_shard(model.failing)
            raise RuntimeError("CUDA required")
        fully_shard(model.init)
    """), "setup")
    before, set_device, failing, init = events(flow, model.SHARD)
    assert init.on_every_path_to(set_device) and before.on_every_path_to(set_device)
    assert not init.on_every_path_to(before) and not init.on_every_path_to(failing)


def test_a_list_holding_tuples_of_modules_comes_from_them():
    """`pairs.append((layer, experts))`: the list's elements come from what the tuple holds (a tuple's
    or a list's elements are read as a set's are)."""
    flow = flow_of(program_of("""
    def main(model, experts):
        pairs = []
        for layer in model.layers:
            pairs.append((layer, experts))
        groups = []
        groups.append([model.head])
    """), "main")
    assert flow.derived_from["pairs"] == {"model", "experts"} and flow.derived_from["groups"] == {"model"}


def test_a_copy_knows_what_it_copies():
    """`copy.deepcopy(loader)` bound to a name, or handed to a function as its parameter, holds a copy
    of `loader` (SaltyPeppermint/toothless). Near miss: a library's function given the loader."""
    flow = flow_of(program_of("""
    import copy
    def use(loader):
        for x in loader:
            pass
    def main(loader):
        twin = copy.deepcopy(loader)
        use(copy.copy(loader))
        other = make(loader)
    """), "main")
    assert flow.copies == {"twin": model.Ref("loader"), "use@1:loader": model.Ref("loader")}


def test_the_rank_where_a_test_holds_it_at_zero_is_zero():
    """Under `if rank == 0:` the rank is 0 (a device `f"cuda:{rank}"` there is cuda:0); past the `if`,
    and under a test of another number, it is the rank."""
    flow = flow_of(program_of("""
    import torch.distributed as dist
    def main():
        rank = dist.get_rank()
        if rank == 0:
            print(f"cuda:{rank}")
        if rank == 1:
            print(f"cuda:{rank}")
        print(f"cuda:{rank}")
    """), "main")
    logged = [event.args[0] for event in flow.of_kind(model.CALL) if event.qname == "print"]
    rank_formatted = "cuda:" + model.UNKNOWN_PART
    assert [(value.text, value.rank is not None) for value in logged] == [("cuda:0", False), (rank_formatted, True), (rank_formatted, True)]


def test_branches_that_build_the_model_differently_join_into_a_new_value():
    flow = flow_of(program_of("""
    from torch.distributed.fsdp import fully_shard
    def main(tiny):
        model = Base()
        if tiny:
            model = Tiny()
        else:
            model = Big()
        fully_shard(model)
        keep = model
        if tiny:
            keep = fully_shard(keep)
        fully_shard(keep)
    """), "main")
    joined, same, kept = (event.target for event in events(flow, model.SHARD))
    assert joined.variable == "model" and joined.root != "model"
    assert same.root == kept.root  # `keep = fully_shard(keep)` is still `keep` on both paths


def test_loops_over_known_values_visit_them_in_order():
    program = program_of("""
    import itertools
    from torch.distributed.fsdp import fully_shard
    def by_tuple(model):
        for module in (model.embed, model.head, model):
            fully_shard(module)
    def by_chain(model):
        for module in itertools.chain(model.layers, [model]):
            fully_shard(module)
    def by_enumerate(model):
        for i, module in enumerate(reversed([model.a, model.b])):
            fully_shard(module)
    """)
    targets = lambda name: [event.target for event in events(flow_of(program, name), model.SHARD)]
    assert targets("by_tuple") == [model.Ref("model", ("embed",)), model.Ref("model", ("head",)), model.Ref("model")]
    assert targets("by_chain") == [model.Ref("model", ("layers", "[]")), model.Ref("model")]
    assert targets("by_enumerate") == [model.Ref("model", ("b",)), model.Ref("model", ("a",))]


def test_a_parameter_holds_what_its_argument_holds_and_a_default_empty_list_adds_nothing():
    """TorchSpec's `apply_fsdp2(model, modules_to_shard=list(draft.layers))` with `for module in
    modules_to_shard or []:` shards the draft's layers; near miss: an argument of unknown contents."""
    program = program_of("""
    from torch.distributed.fsdp import fully_shard
    def apply(model, modules_to_shard=None):
        for module in modules_to_shard or []:
            fully_shard(module)
        fully_shard(model)
    def by_list(model):
        apply(model, modules_to_shard=list(model.layers))
    def by_comprehension(model):
        apply(model, [m for name, m in model.named_modules() if "mid" in name])
    def unknown(model, blocks):
        apply(model, blocks)
    """)
    targets = lambda name: [event.target for event in events(flow_of(program, name), model.SHARD)]
    assert targets("by_list") == [model.Ref("model", ("layers", "[]")), model.Ref("model")]
    assert targets("by_comprehension")[0].root == "model" and targets("by_comprehension")[0].is_submodule
    assert targets("unknown")[0].root != "model"


def test_an_if_in_each_pass_of_an_unrolled_loop_is_its_own():
    flow = flow_of(program_of("""
    from torch.distributed.fsdp import fully_shard
    def main(model):
        for module in (model.a, model.b):
            if module is not None:
                fully_shard(module)
            else:
                fully_shard(model.c)
    """), "main")
    first, other, second, _ = events(flow, model.SHARD)
    assert first.exclusive(other) and not first.exclusive(second)


def test_a_dispatch_table_calls_one_of_its_functions():
    flow = flow_of(program_of("""
    import torch.distributed as dist
    def run_a():
        dist.init_process_group("nccl")
    def run_b():
        dist.init_process_group("gloo")
    MODES = {"a": run_a, "b": run_b}
    MODES[mode]()
    MODES.get(mode)()
    """), None)
    inits = [event for event in events(flow, model.CALL) if event.qname == "torch.distributed.init_process_group"]
    assert len(inits) == 4 and inits[0].exclusive(inits[1]) and inits[2].exclusive(inits[3])
    assert not inits[0].exclusive(inits[2])


def test_or_after_a_name_known_to_be_none_is_the_other_operand():
    """xtuner's `target = module or self`, `module` left at its default None: `self` is sharded."""
    flow = flow_of(program_of("""
    from torch.distributed.fsdp import fully_shard
    def shard(model, module=None):
        target = module or model
        fully_shard(target)
    def main(model):
        shard(model)
        shard(model, module=model.layers[0])
        shard(model, module=other)
    """), "main")
    whole, *others = (event.target for event in events(flow, model.SHARD))
    assert whole.root == "model" and not whole.path
    # `model.layers[0] or model`, `other or model`: one of the two, not known to be the model
    assert all(target.root != "model" for target in others)


def test_a_module_or_none_is_that_module_where_it_is_used_as_one():
    """Automodel's `lm_head = inner or outer` (outer `... if outer is not None else None`, with `outer`
    left None) and ROLL's helper that returns `getattr(m, "embed_tokens")` or None: each is a
    sub-module of the model, not a root of its own."""
    flow = flow_of(program_of("""
    from torch.distributed.fsdp import fully_shard
    def get_embed(m):
        if hasattr(m, "embed"):
            return getattr(m, "embed")
        return None
    def shard(model, outer=None):
        head = getattr(model, "head", None) or (getattr(outer, "head", None) if outer is not None else None)
        fully_shard(head)
        fully_shard(get_embed(model))
        fully_shard(model.norm if flag else None)
        fully_shard(model.a if flag else model.b)
    def main():
        model = Net()
        shard(model)
    """), "main")
    head, embed, norm, either = (event.target for event in events(flow, model.SHARD))
    assert [(ref.root, ref.path) for ref in (head, embed, norm)] == [("model", ("head",)), ("model", ("embed",)), ("model", ("norm",))]
    assert (either.root, either.path) == ("model", ("[]",))  # one of two: some module one step below the model, as with `or`


def test_a_dispatch_table_at_the_top_level_read_by_a_function():
    """AReaL's `TEST_REGISTRY[args.test]()` in `main`: the table is the module's, bound once."""
    source = """
    import torch.distributed as dist
    def run_a():
        dist.init_process_group("nccl")
    def run_b():
        dist.init_process_group("gloo")
    MODES = {{"a": run_a, "b": run_b}}
    {again}
    def main(mode):
        {local}
        MODES[mode]()
    """

    def inits(**parts) -> list[model.Event]:
        flow = flow_of(program_of(source.format(**{"again": "", "local": "", **parts})), "main")
        return [event for event in events(flow, model.CALL) if event.qname == "torch.distributed.init_process_group"]

    first, second = inits()
    assert first.exclusive(second) and [event.chain for event in (first, second)] == [("main", "run_a"), ("main", "run_b")]
    # Near misses: the module binds it twice, the function binds it, a value is no function of the run.
    assert inits(again='MODES = {"c": run_a}') == []
    assert inits(local='MODES = {}') == []
    unknown = flow_of(program_of(source.format(again="", local="").replace('"b": run_b', '"b": print')), "main")
    assert [event.kind for event in unknown.events] == [model.CALL_VALUE]


def test_a_decorator_runs_its_wrappers_finally_after_the_function():
    flow = flow_of(program_of("""
    import functools
    import torch.distributed as dist
    def cleanup(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            finally:
                dist.destroy_process_group()
        return wrapper
    @cleanup
    def main(backend):
        dist.init_process_group(backend)
    main("nccl")
    """), None)
    calls = [event.qname for event in events(flow, model.CALL) if event.qname.startswith("torch.")]
    assert calls == ["torch.distributed.init_process_group", "torch.distributed.destroy_process_group"]
    init = next(event for event in events(flow, model.CALL) if event.qname == "torch.distributed.init_process_group")
    assert init.args[0].constant is None and init.node.args[0].value.value == "backend"


def test_a_decorator_that_returns_its_wrapper_from_an_arm_or_the_function_itself():
    """prime-rl's clean_exit: `if asyncio.iscoroutinefunction(func): return func` else the wrapper."""
    source = """
    import asyncio
    import functools
    import torch.distributed as dist
    def clean_exit(func):
        if asyncio.iscoroutinefunction(func):
            return func
        else:
            @functools.wraps(func)
            def sync_wrapper(*args, **kwargs):
                try:
                    return func(*args, **kwargs)
                finally:
                    dist.destroy_process_group()
            return sync_wrapper
    @clean_exit
    def main():
        dist.init_process_group("nccl")
    main()
    """
    calls = [event.qname for event in events(flow_of(program_of(source), None), model.CALL) if event.qname.startswith("torch.")]
    assert calls == ["torch.distributed.init_process_group", "torch.distributed.destroy_process_group"]
    # Two wrappers: for a function that is no `async def`, the one of the other arm; where the test
    # is on something else, which one runs is not known, and neither is followed.
    two = source.replace("            return func\n", "            async def async_wrapper(*args, **kwargs):\n                return await func(*args, **kwargs)\n"
                         "            return async_wrapper\n")
    for test, followed in [("asyncio.iscoroutinefunction(func)", True), ("FAST", False)]:
        program = program_of(two.replace("asyncio.iscoroutinefunction(func)", test))
        calls = [event.qname for event in events(flow_of(program, None), model.CALL) if event.qname.startswith("torch.")]
        assert calls == ["torch.distributed.init_process_group", "torch.distributed.destroy_process_group"][:1 + followed], test


def test_a_rank_read_through_an_object_guards():
    flow = flow_of(program_of("""
    import torch
    def save(state):
        if Cluster().get_rank() == 0:
            torch.save(state, "model.pt")
    """), "save")
    (save,) = [event for event in events(flow, model.CALL) if event.qname == "torch.save"]
    assert save.rank_guards


def test_initializing_each_parameter_touches_the_module():
    flow = flow_of(program_of("""
    import torch.nn as nn
    def init(model):
        for p in model.parameters():
            nn.init.trunc_normal_(p, std=0.02)
    """), "init")
    (call,) = [event for event in events(flow, model.CALL) if event.qname == "torch.nn.init.trunc_normal_"]
    assert call.touches(model.Ref("model"))


def test_an_attribute_bound_differently_by_match_cases_is_read_again_after_them():
    # fairseq2's trainer: the implicit no-match arm binds nothing; the join must not fail on it.
    flow = flow_of(program_of("""
    import torch.distributed as dist
    class Trainer:
        def step(self):
            match self._state:
                case State.A:
                    self._state = self._step_a()
                case State.B:
                    self._state = self._step_b()
            dist.barrier()
            return self._state
    """), "Trainer.step")
    assert [event.qname for event in events(flow, model.CALL)][-1] == "torch.distributed.barrier"
    assert flow.returned.ref == model.Ref("self", ("_state",))


def test_modules_yields_the_module_itself_children_does_not():
    flow = flow_of(program_of("""
from torch.distributed.fsdp import fully_shard

def main(model):
    for name, module in reversed(list(model.named_modules())):
        fully_shard(module)
    for child in model.children():
        fully_shard(child)
"""), "main")
    every, children = (event.target for event in events(flow, model.SHARD))
    root = model.Ref(every.root)
    assert every.may_be(root) and every.is_within(root)
    assert not children.may_be(root) and children.is_within(root)
def test_a_direct_element_of_a_container_is_told_from_a_module_at_any_depth():
    flow = flow_of(program_of("""
    from torch.distributed.fsdp import fully_shard
    def main(model):
        for layer in model.layers:
            fully_shard(layer)
        for i, block in enumerate(model.blocks.values()):
            if i % 2:
                fully_shard(block)
        fully_shard(model.layers[0])
        fully_shard(model.layers[i])
        for m in model.modules():
            fully_shard(m)
    """), "main")
    loop, odd, first, computed, anywhere = (event.args[0] for event in events(flow, model.SHARD))
    assert loop.element == model.Element(model.Ref("model", ("layers",)), None, ()) and loop.ref == model.Ref("model", ("layers", "[]"))
    assert odd.element.container == model.Ref("model", ("blocks",)) and odd.element.index is None
    assert first.element == model.Element(model.Ref("model", ("layers",)), "0")
    assert computed.element.index == "?"
    assert anywhere.element is None  # `modules()`: a module at any depth, or `model` itself


def test_a_name_called_as_a_class_is_what_built_the_object_through_to():
    flow = flow_of(program_of("""
    from models import GPT
    class TinyLM:
        pass
    def main(device):
        model = TinyLM(4).to(device)
        other = GPT(config).cuda()
        plain = make()
    """), "main")
    assert flow.instances == {"model": "TinyLM", "other": "models.GPT", "plain": "make"}  # a name called: a class or a function


def test_an_attribute_assignment_records_the_value_assigned():
    flow = flow_of(program_of("""
    def main(model):
        model.output.weight = model.tok_embeddings.weight
    """), "main")
    (tie,) = events(flow, model.ASSIGN)
    assert tie.target == model.Ref("model", ("output", "weight")) and tie.value.ref == model.Ref("model", ("tok_embeddings", "weight"))


def test_a_module_built_on_the_default_device_is_known_only_from_torch_nn_and_the_runs_own_classes():
    program = program_of("""
import torch
import torch.nn as nn
import te

class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.apply(self._init)

    def _init(self, module):
        nn.init.zeros_(module.weight)

class Net(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(2)])

class OnGpu(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim).cuda()

class Placed(nn.Module):
    def __init__(self, dim, device):
        super().__init__()
        self.proj = nn.Linear(dim, dim, device=device)

class Library(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = te.Linear(dim, dim)

class Derived(Net):
    pass

a = Net(4)
b = nn.Sequential(nn.Linear(4, 4), Block(4))
c = OnGpu(4)
d = Placed(4, "cpu")
e = Library(4)
f = Derived(4)
g = nn.Linear(4, 4).cuda()
h = nn.Sequential(g)
i = te.Linear(4, 4)
""")
    flow = flow_of(program, None)
    from fsdplint.model.devices import builds_on_default_device

    built = {event.binding.root: builds_on_default_device(program, event) for event in flow.events if event.binding is not None}
    assert built == {"a": True, "b": True, "c": False, "d": False, "e": False, "f": True, "g": False, "h": False, "i": False}
    assert set(program.files[0].classes) == {"Block", "Net", "OnGpu", "Placed", "Library", "Derived"}


def test_past_the_programs_budget_the_flows_left_are_unknown_files_that_import_fsdp_first(monkeypatch):
    from fsdplint.model import program as program_module

    texts = {
        "helpers.py": "import torch.distributed as dist\n\ndef sync():\n    dist.barrier()\n",
        "train.py": "from torch.distributed.fsdp import fully_shard\n\ndef main(model):\n    fully_shard(model)\n    model.forward(1)\n",
    }
    files = [model.build_file_model(SourceFile(Path(name), name, text, "utf-8", False), cst.parse_module(text)) for name, text in texts.items()]
    monkeypatch.setattr(program_module, "PROGRAM_BUDGET", 3)
    program = model.Program(files)
    assert [flow.file.display for flow in program.flows if not flow.skipped] == ["train.py"]  # its function's 3 expressions
    assert {(flow.file.display, flow.function.qualname if flow.function else None) for flow in program.skipped_flows} == {
        ("helpers.py", "sync"), ("helpers.py", None), ("train.py", None)}
    assert all(not flow.events for flow in program.skipped_flows)


def test_functions_skipped_for_the_programs_budget_are_one_note_per_file(monkeypatch, tmp_path):
    from fsdplint.api import _engine
    from fsdplint.discovery import discover
    from fsdplint.model import program as program_module

    text = "from torch.distributed.fsdp import fully_shard\n\ndef main(model):\n    fully_shard(model)\n\ndef other(model):\n    fully_shard(model)\n"
    (tmp_path / "train.py").write_text(text)
    monkeypatch.setattr(program_module, "PROGRAM_BUDGET", len(text) // program_module.CHARACTERS_PER_STEP + 1)  # its parse, then one step
    engine = _engine(None, None, None, True)
    sources, problems = engine.read(discover([tmp_path], engine.settings.excluded, engine.settings.project_root, force_exclude=False))
    notes = engine.check(sources, problems).notes
    assert [(note.code, note.message.split(":")[0]) for note in notes] == [
        ("FSDP006", "the analysis budget of the files checked with this one was spent before 2 of this file's bodies (functions or the module) were analyzed")]


def test_a_start_the_programs_budget_never_reaches_is_not_parsed(monkeypatch):
    from fsdplint.model import program as program_module

    texts = {
        "helpers.py": "import torch.distributed as dist\n\ndef sync():\n    dist.barrier()\n",
        "train.py": "from torch.distributed.fsdp import fully_shard\n\ndef main(model):\n    fully_shard(model)\n    model.forward(1)\n",
    }
    parsed: list[str] = []

    def parse(source):
        parsed.append(source.display)
        return model.build_file_model(source, cst.parse_module(source.text))

    starts = [model.UnparsedFile(SourceFile(Path(name), name, text, "utf-8", False), parse) for name, text in texts.items()]
    parsing = len(texts["train.py"]) // program_module.CHARACTERS_PER_STEP  # what parsing it is charged
    monkeypatch.setattr(program_module, "PROGRAM_BUDGET", parsing)
    assert [(flow.file.display, flow.skipped) for flow in model.Program(starts).flows] == [("train.py", True), ("train.py", True)]
    parsed.clear()
    monkeypatch.setattr(program_module, "PROGRAM_BUDGET", parsing + 3)
    starts = [model.UnparsedFile(start.source, parse) for start in starts]
    program = model.Program(starts)
    assert parsed == ["train.py"]  # the file that mentions FSDP first; its parse and its function's 3 expressions spend the budget
    assert [start.source.display for start in program.unanalyzed] == ["helpers.py"]
    assert [(flow.file.display, flow.skipped) for flow in program.flows] == [("train.py", False), ("train.py", True)]
    assert model.Program(starts).files == program.files and parsed == ["train.py"]  # a file is parsed once


def test_a_flag_set_true_and_false_in_the_arms_of_a_rank_test_holds_where_its_true_arm_runs():
    flow = flow_of(program_of("""
import torch.distributed as dist

def main():
    serve = True
    if dist.get_rank() > 0:
        serve = False
    if serve:
        dist.barrier()
    if not serve:
        dist.barrier()
    chosen = "a"
    if dist.get_rank() == 0:
        chosen = "b"
    if chosen:
        dist.barrier()
"""), "main")
    first, second, third = (event for event in events(flow, model.CALL) if event.qname == "torch.distributed.barrier")
    assert [guard.condition() for guard in first.rank_guards] == [("dist.get_rank() == 0", True)]
    assert [guard.condition() for guard in second.rank_guards] == [("dist.get_rank() == 0", False)]
    assert third.rank_guards == ()  # not a flag: a string either way


def test_a_file_runs_as_a_script_when_it_tests_for_main_at_its_top_level():
    script = program_of('import torch\n\nif __name__ == "__main__":\n    main()\n').files[0]
    reversed_test = program_of("if '__main__' == __name__:\n    main()\n").files[0]
    nested = program_of('def f():\n    if __name__ == "__main__":\n        main()\n').files[0]
    library = program_of("def main():\n    pass\n").files[0]
    assert script.runs_as_script and reversed_test.runs_as_script
    assert not nested.runs_as_script and not library.runs_as_script


def test_the_vocabulary_of_the_default_process_group():
    from fsdplint import distributed

    assert distributed.needs_process_group("torch.distributed.get_rank")
    assert distributed.needs_process_group("torch.distributed.distributed_c10d.all_reduce")
    assert not distributed.needs_process_group("torch.distributed.init_process_group")
    assert not distributed.needs_process_group("torch.distributed.is_initialized")
    assert "torch.distributed.fsdp.fully_shard" in distributed.PROCESS_GROUP_STARTERS  # its default mesh starts one
    assert distributed.tensor_arguments("torch.distributed.all_gather") == ((1, "tensor"),)
    assert distributed.tensor_arguments("torch.distributed.all_gather_object") == ()


def test_loops_record_what_they_iterate_and_the_events_of_their_body():
    flow = flow_of(program_of("""
    def train(model, loader):
        for epoch in range(3):
            for batch in loader:
                model(batch)
            evaluate(model)
        while True:
            step()
    """), "train")
    inner, outer, endless = flow.loops
    assert type(outer.node) is cst.For and outer.iterable.event.qname == "range"
    assert inner.iterable.ref.name == "loader"
    assert [event.qname or event.targets[0].name for event in inner.body(flow)] == ["model"]
    assert [event.qname or event.targets[0].name for event in outer.body(flow)] == ["model", "evaluate"]
    assert outer.holds(inner.body(flow)[0]) and not endless.holds(inner.body(flow)[0])
    assert inner.within(outer) and not outer.within(inner) and not endless.within(outer)
    assert endless.iterable is None and [event.targets[0].name for event in endless.body(flow)] == ["step"]


def test_values_computed_from_the_rank_say_how_they_differ_between_ranks():
    program = program_of("""
    import torch.distributed as dist

    def steps_of(n, extra):
        for _ in range(extra):
            pass

    def main(data, n):
        rank = dist.get_rank()
        more = n + rank
        counted = range(more)
        steps_of(n, more)
    """)
    flow = flow_of(program, "main")
    loop = flow.loops[0]
    assert loop.iterable.rank_derived == model.RANK_COUNT and loop.chain == ("main", "steps_of")
    walked = {}
    for event in flow.events:
        if event.binding is not None:
            walked[event.binding.name] = event
    assert walked["counted"].args[0].rank_derived == model.RANK_NUMBER
    own = flow_of(program, "steps_of")
    assert own.loops[0].iterable.rank_derived is None  # a parameter no caller's value reaches here


def test_rank_derived_values_as_bound():
    from fsdplint.model.walker import Walker

    text = """
    import os
    import torch.distributed as dist
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    size = int(os.environ["WORLD_SIZE"])
    n = 10
    more = n + rank
    counted = range(more)
    strided = range(rank, n, world_size)
    mine = data[rank::world_size]
    chunk = chunks[rank]
    even = data[rank * n:(rank + 1) * n]
    blocks = range(rank * n, (rank + 1) * n)
    same = range(n)
    length = len(mine)
    batches = range(0, len(mine), 4)
    """
    flow = model.Flow(program_of("x = 1"), None, None)
    file = program_of(text).files[0]
    flow.file = file
    walker = Walker(flow, file, None, env={}, prefix="", chain=("<module>",), depth=0)
    walker.walk_suite(file.module, ())
    names = ("more", "counted", "strided", "mine", "chunk", "even", "blocks", "same", "length", "batches")
    derived = {name: walker.env[name].rank_derived for name in names}
    assert derived == {"more": model.RANK_NUMBER, "counted": model.RANK_COUNT, "strided": model.RANK_PART, "mine": model.RANK_PART,
                       "chunk": model.RANK_PART, "even": None, "blocks": None, "same": None, "length": model.RANK_PART,
                       "batches": model.RANK_PART}
    assert walker.env["world_size"].world_size and walker.env["size"].world_size and not walker.env["rank"].world_size
    assert flow.reads_rank


def test_flows_know_whether_they_read_the_rank_and_classes_are_indexed():
    program = program_of("""
    import os
    from torch.utils.data import Dataset

    class Shard(Dataset):
        def __init__(self, n):
            self.rank = int(os.environ["RANK"])
        def __getitem__(self, i):
            return i

    class Outer:
        class Inner:
            pass

    ds = Shard(3)
    """)
    file = program.files[0]
    assert set(file.classes) == {"Shard", "Outer", "Outer.Inner"}
    assert flow_of(program, "Shard.__init__").reads_rank and not flow_of(program, "Shard.__getitem__").reads_rank
    built = next(event for event in flow_of(program, None).events if event.binding and event.binding.name == "ds")
    assert program.class_of(file, built.node.func) == (file, "Shard")


def test_strings_are_known_through_parameters_defaults_and_names_assigned_once():
    program = program_of("""
    import os
    import torch.distributed as dist

    def setup(host, port, scheme="tcp"):
        os.environ["MASTER_ADDR"] = host
        dist.init_process_group("gloo", init_method=f"{scheme}://{host}:{port}")

    name = "localhost"
    setup(name, port)
    """)
    flow = flow_of(program, None)
    (setting,) = events(flow, model.SET_ENV)
    assert (setting.variable, setting.value.text) == ("MASTER_ADDR", "localhost")
    init = next(event for event in events(flow, model.CALL) if event.qname == "torch.distributed.init_process_group")
    assert init.kwargs["init_method"].text == f"tcp://localhost:{model.UNKNOWN_PART}"
    # Without a caller, nothing is known of the parameters; the default is not known either.
    alone = next(event for event in events(flow_of(program, "setup"), model.CALL) if event.qname == "torch.distributed.init_process_group")
    assert alone.kwargs["init_method"].text == f"{model.UNKNOWN_PART}://{model.UNKNOWN_PART}:{model.UNKNOWN_PART}"


def test_a_callee_is_walked_once_per_calling_context_and_copied_into_the_other_calls(monkeypatch):
    from fsdplint.model import summaries

    copies = []
    apply = summaries._apply
    monkeypatch.setattr(summaries, "_apply", lambda summary, *rest: copies.append(summary.context.key[0]) or apply(summary, *rest))
    program = program_of("""
    from torch.distributed.fsdp import fully_shard

    def shard(model, last=True):
        for block in model.layers:
            fully_shard(block)
        if last:
            fully_shard(model)
        made = Net()
        return made

    def first(model):
        kept = shard(model)

    def second(other):
        if cond:
            kept = shard(other)
        again = shard(other)
        partly = shard(other, last=False)
    """)
    shard = next(function for function in program.files[0].functions.values() if function.name == "shard")
    # `second`'s first two calls give `first`'s context (a module, `last` left to its default);
    # `last=False` is another one.
    assert copies == [id(shard.node)] * 2
    second = flow_of(program, "second")
    shards = events(second, model.SHARD)
    block, root = [("other", ("layers", "[]"))], [("other", ())]
    assert [[(target.root, target.path) for target in event.targets] for event in shards] == [block, root, block, root, block]
    # Each copy is of its own call: its call site, its arms (the first under `if cond:`), its own variables.
    sites = [event.call_sites[0] for event in shards]
    assert sites[0] is sites[1] and sites[2] is sites[3] and sites[0] is not sites[2] and sites[4] not in sites[:4]
    assert shards[0].arms and not shards[2].arms and shards[0].chain == ("second", "shard")
    made = [event.binding.root for event in events(second, model.CALL_VALUE) if event.binding is not None]
    assert len(set(made)) == 3 and all(root.startswith("shard@") and root.endswith(":made") for root in made)


def test_a_string_literal_is_the_string_python_reads():
    from fsdplint.model.syntax import string_value

    for literal in ['"nccl"', "'gloo'", '"""a\nb"""', 'r"\\d+"', 'u"x"', '"tab\\there"', "b'bytes'", 'rb"\\x00"', "'it\\'s'", 'R"C:\\path"', '""']:
        node = cst.parse_expression(literal)
        assert string_value(node) == node.evaluated_value, literal



def test_a_method_called_on_an_object_built_in_place_is_walked():
    """molmo's `ModelEvaluator(cfg).run()`: the method is found by the class that built the receiver,
    as for `evaluator = ModelEvaluator(cfg); evaluator.run()`."""
    source = """
import torch

class Evaluator:
    def __init__(self, cfg):
        self.cfg = cfg

    def run(self, model):
        return torch.optim.AdamW(model.parameters())

def main(model, cfg):
    {call}
"""
    for call in ("Evaluator(cfg).run(model)", "evaluator = Evaluator(cfg)\n    evaluator.run(model)"):
        program = program_of(source.format(call=call))
        assert [event.function.qualname for event in events(flow_of(program, "main"), model.OPTIMIZER)] == ["Evaluator.run"], call


def test_a_method_inherited_from_a_base_class_of_the_run_is_walked():
    """cosmos-rl's `net.fully_shard(mesh)`, defined by the base class of `net`'s class; `self.shard()`
    inside the subclass reaches it the same way. The class's own method comes first."""
    source = """
import torch
from torch.distributed.fsdp import fully_shard

class Base(torch.nn.Module):
    def shard(self, mesh):
        for block in self.blocks:
            fully_shard(block, mesh=mesh)

class Net(Base):
    def build(self, mesh):
        self.shard(mesh)

class Own(Base):
    def shard(self, mesh):
        pass

def main(mesh):
    {call}
"""
    for call, expected in [("Net().shard(mesh)", ["Base.shard"]), ("net = Net()\n    net.shard(mesh)", ["Base.shard"]),
                           ("Net().build(mesh)", ["Base.shard"]), ("Own().shard(mesh)", [])]:
        program = program_of(source.format(call=call))
        assert [event.function.qualname for event in events(flow_of(program, "main"), model.SHARD)] == expected, call


def test_files_are_parsed_without_node_validation_and_nodes_built_after_are_still_validated():
    from fsdplint.model.syntax import parse_module

    text = "import torch\nif not(x):\n    model = torch.nn.Linear(2, 2)  # kept\n"
    assert parse_module(text).deep_equals(cst.parse_module(text)) and parse_module(text).code == text
    with pytest.raises(cst.ParserSyntaxError):
        parse_module("def f(:\n")
    with pytest.raises(cst.CSTValidationError):  # restored, after a success and after a failure
        cst.UnaryOperation(operator=cst.Not(whitespace_after=cst.SimpleWhitespace("")), expression=cst.Name("x"))


def test_the_rest_of_a_block_after_an_arm_known_taken_that_returns_does_not_run():
    """ezpz's `wrap_model(model, use_fsdp=False)` returns through `if not use_fsdp: return DDP(model)`:
    the `fully_shard` after it never runs. Likewise where both arms of an `if` leave the block. Near
    misses: a flag the model does not know, and a taken arm that falls through."""
    program = program_of("""
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP
    def wrap(model, use_fsdp=True):
        if not use_fsdp:
            return DDP(model)
        fully_shard(model)
        return model
    def wrap_is(model, use_fsdp=True):
        if use_fsdp is False:
            return DDP(model)
        return fully_shard(model)
    def both_exit(model, flag):
        if flag:
            return model
        else:
            raise ValueError(flag)
        fully_shard(model)
    def falls_through(model, use_fsdp=True):
        if not use_fsdp:
            model = DDP(model)
        fully_shard(model)
    def without_fsdp(model, flag):
        wrap(model, use_fsdp=False)
        wrap_is(model, use_fsdp=False)
        both_exit(model, flag)
    def unknown(model, flag):
        wrap(model, use_fsdp=flag)
        falls_through(model, use_fsdp=False)
    """)
    shards = lambda name: [event.chain[-1] for event in events(flow_of(program, name), model.SHARD)]
    assert shards("without_fsdp") == []
    assert shards("unknown") == ["wrap", "falls_through"]


def test_a_test_on_an_integer_the_call_passed_takes_one_arm():
    """mochi's `get_model(..., world_size=1)`: `if world_size > 1:` wraps in FSDP, so with 1 the wrap
    never runs; with 2 it does, and with a value the model does not know, either arm may run."""
    source = """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def get_model(model, world_size):
    if world_size > 1:
        model = FSDP(model)
    elif world_size == 0:
        model = None
    return model

def main(model, n):
    model = get_model(model, world_size={given})
"""
    for given, wraps in [("1", []), ("2", ["FullyShardedDataParallel"]), ("0x2", ["FullyShardedDataParallel"]), ("n", ["FullyShardedDataParallel"])]:
        flow = flow_of(program_of(source.format(given=given)), "main")
        assert [event.qname.rsplit(".", 1)[-1] for event in flow.shard_events()] == wraps, given


def test_an_integer_default_of_a_parameter_the_call_leaves_out_is_known():
    """VideoX-Fun's `set_multi_gpus_devices(ulysses_degree, ring_degree, classifier_free_guidance_degree=1)`
    called with two 1s: `if u > 1 or r > 1 or c > 1: init_process_group(...)` never runs. Near
    misses: the call passes 2 for the defaulted parameter, or a `*args` the model cannot read."""
    source = """
import torch.distributed as dist

def setup(u, r, c=1):
    if u > 1 or r > 1 or c > 1:
        dist.init_process_group("nccl")

def main(rest):
    setup({given})
"""
    for given, runs in [("1, 1", False), ("1, 1, 2", True), ("1, 1, c=2", True), ("1, *rest", True), ("2, 1", True)]:
        flow = flow_of(program_of(source.format(given=given)), "main")
        assert any(event.qname == "torch.distributed.init_process_group" for event in flow.events) is runs, given


def test_an_attribute_the_constructor_stores_from_a_literal_is_known_in_the_objects_methods():
    """HydraGNN's `LSMS_RawDataLoader(config)`: `dist=False` by default, handed to the base's
    `__init__`, kept in `self.dist`; `load_raw_data` runs `all_reduce` only `if self.dist:`, so on
    rank 0 alone it never does. Near misses, each where the collective may run: the call passes
    `dist=True` or a value not known, the caller or another method assigns the attribute, the object
    is handed to code the model cannot see, a base is another library's class."""
    source = """
import torch.distributed as dist
{base_import}

class Base{base}:
    def __init__(self, config, dist=False):
        self.config = config
        self.dist = dist

    def load(self):
        if self.dist:
            dist.all_reduce(self.config)

class Loader(Base):
    def __init__(self, config, dist=False):
        super(Loader, self).__init__(config, dist)
{method}
def main(config, flag):
    loader = Loader({given})
{between}    loader.load()
"""
    def runs(given="config", between="", method="", base="", base_import=""):
        flow = flow_of(program_of(source.format(given=given, between=between, method=method, base=base, base_import=base_import)), "main")
        return any(event.qname == "torch.distributed.all_reduce" for event in flow.events)

    assert not runs()
    assert not runs(given="config, False")
    assert runs(given="config, dist=True")
    assert runs(given="config, flag")
    assert runs(given="config, *flag")
    assert runs(between="    loader.dist = flag\n")
    assert runs(between="    configure(loader)\n")
    assert runs(method="    def enable(self):\n        self.dist = True\n")
    assert runs(method="    def enable(self):\n        self.dist, self.config = True, None\n")
    assert runs(base="(Library)", base_import="from library import Library")


def test_an_if_on_a_literal_takes_one_arm():
    """`if True: ... else: ...` runs its body only, `if False:` and `if 0:` their `else` (WeatherGenerator's
    probe: a literal test still let the `else` arm's state dict reach `torch.save`)."""
    source = """
import torch.distributed as dist

def main():
    if {test}:
        dist.barrier()
    else:
        dist.all_reduce(x)
"""
    for test, reached in [("True", {"barrier"}), ("False", {"all_reduce"}), ("0", {"all_reduce"}), ("1", {"barrier"}),
                          ("flag", {"barrier", "all_reduce"})]:
        flow = flow_of(program_of(source.format(test=test)), "main")
        assert {event.qname.rsplit(".", 1)[-1] for event in flow.events if event.qname and event.qname.startswith("torch.distributed")} == reached, test


@pytest.mark.parametrize("loop, forever", [
    ("while True:\n    serve(queue.get())", True),
    ("while 1:\n    for x in queue.get():\n        if x is None:\n            break", True),  # the inner loop's break
    ("while True:\n    if failed():\n        raise RuntimeError", True),  # it stops by an error only
    ("while True:\n    def stop():\n        return\n    serve(stop)", True),
    ("while True:\n    if queue.get() is None:\n        break", False),
    ("while True:\n    if done():\n        return", False),
    ("while True:\n    if done():\n        sys.exit(0)", False),
    ("while running:\n    serve(queue.get())", False),
    ("with torch.autocast('cuda'):\n    while True:\n        serve(queue.get())", True),
    ("with torch.autocast('cuda'):\n    while True:\n        break", False),
])
def test_a_loop_nothing_leaves_normally_runs_forever(loop, forever):
    from fsdplint.model.syntax import runs_forever

    assert runs_forever(cst.parse_statement(loop)) is forever


def test_is_none_on_a_parameter_given_a_literal():
    """`if flag is not None:` with `flag=True` passed runs its arm (the test once read as a chained
    comparison, `(known == "None") == type(op) is Is`, and was false for every literal but None)."""
    source = """
import torch.distributed as dist

def save(flag=None):
    if flag {test} None:
        dist.barrier()

def main():
    save({given})
"""
    for test, given, runs in [("is not", "flag=True", True), ("is not", "flag=0", True), ("is not", "", False), ("is", "flag=True", False), ("is", "", True)]:
        flow = flow_of(program_of(source.format(test=test, given=given)), "main")
        assert any(event.qname == "torch.distributed.barrier" for event in flow.events) is runs, (test, given)


def test_a_literal_returned_on_one_path_only_is_not_the_functions_result():
    """cosmos-rl's `_init_distributed()`: `return dist.get_rank(), dist.get_world_size()` after starting a
    group, else `return 0, 1`. The caller's `if world_size > 1: dist.destroy_process_group()` may run;
    a function returning 1 on every path makes it dead."""
    source = """
import os
import torch.distributed as dist

def init():
    if "RANK" in os.environ:
        dist.init_process_group("nccl")
        return dist.get_rank(), {size}
    return 0, 1

def main():
    rank, world_size = init()
    if world_size > 1:
        dist.destroy_process_group()
"""
    for size, destroys in [("dist.get_world_size()", True), ("1", False)]:
        flow = flow_of(program_of(source.format(size=size)), "main")
        assert any(event.qname == "torch.distributed.destroy_process_group" for event in flow.events) is destroys, size


def test_an_assert_that_the_rank_is_one_value_says_the_run_goes_on_on_that_rank_only():
    program = program_of("""
    import os
    import torch.distributed as dist

    def node_leader():
        local_rank = int(os.environ["LOCAL_RANK"])
        assert local_rank == 0, "one process per node"

    def leader(local_rank):
        assert dist.get_rank() == 0 and local_rank == 0

    def some_rank():
        assert int(os.environ["NODE_RANK"]) == 0  # one node, of any number of processes

    def not_pinned(local_rank):
        assert dist.get_rank() != 0
        assert local_rank >= 0
        assert f"cuda:{local_rank}" == "cuda:0"
    """)
    assert flow_of(program, "node_leader").asserted_ranks == {model.LOCAL_RANK}
    assert flow_of(program, "leader").asserted_ranks == {model.GLOBAL_RANK}
    assert flow_of(program, "some_rank").asserted_ranks == {model.SOME_RANK}
    assert flow_of(program, "not_pinned").asserted_ranks == set()


def test_setting_an_environment_variable_by_any_spelling_is_one_event():
    program = program_of("""
    import os
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ.setdefault("MASTER_PORT", "29500")
    os.putenv("CUDA_VISIBLE_DEVICES", "0")
    os.environ.get("RANK")
    """)
    settings = [(event.variable, event.value.text, event.only_if_unset) for event in flow_of(program, None).of_kind(model.SET_ENV)]
    assert settings == [("MASTER_ADDR", "localhost", False), ("MASTER_PORT", "29500", True), ("CUDA_VISIBLE_DEVICES", "0", False)]


def test_whether_the_run_is_distributed_is_the_same_on_every_rank_and_drops_out_of_a_rank_test():
    program = program_of("""
    import torch.distributed as dist

    def is_distributed():
        return dist.is_available() and dist.is_initialized()

    def is_main():
        return not is_distributed() or dist.get_rank() == 0

    def is_main_or_ready(ready):
        return not ready or dist.get_rank() == 0
    """)
    distributed = flow_of(program, "is_distributed").returned
    assert distributed.run_test and distributed.rank_test is None
    # where the run is not distributed, one process runs: the whole differs between ranks as `rank == 0`
    assert flow_of(program, "is_main").returned.rank_test == model.RankTest(True, True, pins=model.GLOBAL_RANK)
    # a test of anything else may be false on every rank: true on some ranks only, where it is false
    assert flow_of(program, "is_main_or_ready").returned.rank_test == model.RankTest(False, True)


def test_a_released_program_is_freed_by_reference_counting_not_the_cyclic_collector():
    import gc
    import weakref

    program = program_of("""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    class Net:
        def shard(self, model):
            fully_shard(model)

    def main(model):
        Net().shard(model)
        dist.barrier()
    """)
    file, flow = weakref.ref(program.files[0]), weakref.ref(program.flows[0])
    gc.disable()
    try:
        program.release()
        del program
        assert file() is None and flow() is None
    finally:
        gc.enable()


def _value_with_every_field_set() -> model.Value:
    """A Value none of whose fields is at its default, each naming a variable of the caller where it can."""
    from types import SimpleNamespace

    def function(name):
        return SimpleNamespace(node=object(), name=name)

    caller = model.Ref("x", ("layers",))
    made = SimpleNamespace(kind=model.CALL, qname="build", method=None, binding=None, targets=(), node=None)
    return model.Value(
        ref=caller, params_of=frozenset({caller}), params_read=(made,), iterates=caller, iterates_self=True, event=made,
        elements=(model.Value(ref=model.Ref("y")),), visits=(model.Value(ref=model.Ref("z")),), callees=(function("f"),),
        table=(function("g"),), entries=(("lr", model.Value(ref=model.Ref("y")), object()),), rank=model.Rank(model.GLOBAL_RANK), constant="True", literal="True",
        rank_test=model.RankTest(True, True), always_false=True, element=model.Element(caller, "0", ()), each_of=caller,
        built_by="Model", rank_derived=model.RANK_NUMBER, world_size=True, run_test=True, text="cuda",
        dtypes=frozenset({"torch.float16"}), type_test=True, formula=("eq", caller, "'fsdp'"), none_on_some_ranks=True, partial_of="torch.distributed.fsdp.fully_shard")


def test_a_calling_contexts_shape_and_a_copied_walk_keep_every_field_of_a_value():
    """summaries.py lists Value's fields by hand twice (the shape of a calling context, and the copy of
    a walk into another call): a field added to Value and left out of either would make two contexts
    that differ in it one, or drop it from every copied walk."""
    import dataclasses
    from types import SimpleNamespace

    from fsdplint.model import summaries

    full = _value_with_every_field_set()
    assert all(getattr(full, f.name) != f.default for f in dataclasses.fields(model.Value)), "set every field"
    flow = SimpleNamespace(optimizer_bindings=set())

    def shape(value):
        return summaries._Shaper(flow, "own@1:").value(value)

    for f in dataclasses.fields(model.Value):
        assert shape(dataclasses.replace(full, **{f.name: f.default})) != shape(full), f"the context's shape ignores Value.{f.name}"

    # A copy into a call where the caller's `x`, `y`, `z` are `a`, `b`, `c` and its event is another.
    recorded = summaries.Context((), roots=["x", "y", "z"], events=[full.event], values=[])
    other_event = SimpleNamespace()
    summary = SimpleNamespace(context=recorded, first_call_id=1, last_call_id=1, start=0, events=[], around=None)
    copier = summaries.Copier(summary, summaries.Context((), roots=["a", "b", "c"], events=[other_event], values=[]), None, 1, 0)
    copy = copier.value(full)
    for f in dataclasses.fields(model.Value):
        assert getattr(copy, f.name) != f.default, f"a copied walk drops Value.{f.name}"
    assert copy.ref == model.Ref("a", ("layers",)) and copy.event is other_event and copy.elements[0].ref == model.Ref("b")


def test_a_forward_is_a_call_of_a_sharded_module_not_of_a_part_of_one():
    """LongLive: `get_q = module.get_quantized_parameters; get_q(...)` for each module of a sharded
    model calls a method, which runs no FSDP hook. Calling a sharded block, or a module of
    `model.modules()` (which may be the model itself), is a forward."""
    program = program_of("""
    from torch.distributed.fsdp import fully_shard
    def main(model, x):
        for layer in model.layers:
            fully_shard(layer)
        fully_shard(model)
        for name, module in model.named_modules():
            get_q = module.get_quantized_parameters
            get_q("weight")
        block = model.layers[0]
        block(x)
        for module in model.modules():
            module(x)
    """)
    main = flow_of(program, "main")
    called = [(event.target, main.collective(event)) for event in events(main, model.CALL_VALUE)]
    assert [forward for _, forward in called] == [None, "forward", "forward"], called


def test_in_init_a_module_is_sharded_only_by_what_ran_before():
    """LongLive: `__init__` quantizes `self.model.critic` and wraps it after; what other methods of the
    class shard on `self` is no fact before that. Near miss: a later method, which runs after `__init__`."""
    program = program_of("""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    class Trainer:
        def __init__(self, policy):
            self.model.critic.step()
            self.model.critic = FSDP(self.model.critic, auto_wrap_policy=policy)
        def train(self):
            self.model.critic.step()
    """)
    for function, sharded in (("Trainer.__init__", False), ("Trainer.train", True)):
        flow = flow_of(program, function)
        step = next(event for event in events(flow, model.METHOD) if event.method == "step")
        assert bool(flow.sharding_of(step.target, step.index, fsdp=1)) is sharded, function


def test_a_name_rebound_to_a_call_on_itself_keeps_what_it_was_made_from():
    """TorchSpec: `dflash = DFlashModel(draft_model=draft)`, then `dflash = load_state(dflash, ...)`: still
    the module built around `draft` (whose layers were sharded). Near miss: a new object under the name."""
    program = program_of("""
    import copy
    import torch
    def main(draft, state):
        wrapped = Wrapper(draft_model=draft)
        wrapped = load_state(wrapped, state)
        other = Wrapper(draft_model=draft)
        other = Fresh()
        twin = copy.deepcopy(draft)
        twin = torch.compile(twin)
    """)
    derived = flow_of(program, "main").derived_from
    assert "draft" in derived["wrapped"]
    assert "draft" not in derived.get("twin", set())  # a deep copy is no part of the original (compiled, still the copy)
    assert not any("draft" in sources for root, sources in derived.items() if root.startswith("other#"))


def test_a_module_built_of_single_layers_holds_no_blocks():
    """The toy models of tests and demos (pytorch/ao's `nn.Sequential(nn.Linear, nn.ReLU, nn.Linear)`
    returned by a helper, ezpz's CNN whose `__init__` builds four layers, d9d's model of two modules
    that each hold one `nn.Parameter`, a class derived from such a class of the run, as TrainRL's
    `ValueHead`, a class whose `__init__` keeps such a Sequential in an attribute) have no blocks to
    shard first. Near misses: a ModuleList, a helper method that may
    build more, a Sequential of the run's blocks, a module from a call the model cannot read, a class
    of two of the run's layered modules (blocks), a class derived from one that builds a ModuleList, a
    class keeping a Sequential of the run's layered modules."""
    from fsdplint.model.modules import holds_no_blocks

    program = program_of("""
    import copy
    import torch
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    def get_model(k):
        m = nn.Sequential(nn.Linear(k, k), nn.ReLU(), nn.Linear(k, k))
        return m
    class Net(nn.Module):
        def __init__(self, size=28):
            super().__init__()
            self.conv = nn.Conv2d(1, 32, 3, 1)
            self.fc = nn.Linear(self._features(size), 10)
        @staticmethod
        def _features(size):
            return int(size) * 2
    class Stack(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])
    class Built(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.build()
    class Derived(Net):
        pass
    class Leaf(nn.Module):
        def __init__(self, size):
            super().__init__()
            self.param = nn.Parameter(torch.arange(size, dtype=torch.float))
    class OfLeaves(nn.Module):
        def __init__(self, size):
            super().__init__()
            self.w = Leaf(size)
            self.b = Leaf(size)
    class StackOfThree(Stack):
        pass
    class OfNets(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = Net()
            self.second = Net()
    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    class SequenceOfNets(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(Net(), Net())
    def main(rank, config):
        a = get_model(4).to(rank)
        b = Net().cuda()
        c = Stack(4)
        d = Built()
        e = Derived()
        f = nn.Sequential(Net(), Net())
        g = load_model(config)
        h = nn.Linear(4, 4)
        h = h.to(rank)
        i = copy.deepcopy(b)
        j = OfLeaves(4)
        k = OfNets()
        m = StackOfThree(3)
        n = Mlp()
        o = SequenceOfNets()
        for module in (a, b, c, d, e, f, g, h, i, j, k, m, n, o):
            fully_shard(module)
    """)
    main = flow_of(program, "main")
    known = [holds_no_blocks(main, event.target, event.index) for event in events(main, model.SHARD)]
    assert known == [True, True, False, False, True, False, False, True, True, True, False, False, True, False], known


def test_a_string_built_from_the_rank_by_any_spelling_is_formatted_from_it():
    """`f"{rank}"`, `os.path.join(d, f"...")`, `"{}".format(rank)`, `"%d" % rank`, `d + "/" + str(rank)`
    and `Path(d) / f"{rank}.pt"` name a file per rank; near misses: a directory only named like one, and
    arithmetic on the rank (a number, not a string)."""
    program = program_of("""
    import os
    from pathlib import Path
    import torch
    import torch.distributed as dist
    def main(state, d, rank_dir):
        rank = dist.get_rank()
        torch.save(state, f"model_{rank}.pt")
        torch.save(state, os.path.join(d, f"model_{dist.get_rank()}.pt"))
        torch.save(state, "shard_{}.pt".format(rank))
        torch.save(state, d + "/model_%d.pt" % rank)
        torch.save(state, d + "/" + str(rank))
        torch.save(state, Path(d) / f"{rank}.pt")
        torch.save(state, os.path.join(rank_dir, "model.pt"))
        torch.save(state, rank * 2)
    """)
    saves = [event.args[1] for event in events(flow_of(program, "main"), model.CALL) if event.qname == "torch.save"]
    assert [bool(path.rank and path.rank.formatted) for path in saves] == [True] * 6 + [False, False]


def test_a_library_call_takes_the_keywords_of_a_dict_written_out():
    """karlstratos/minGPU: `shared_fsdp_kwargs = dict(device_id=rank, ...)`, then `FSDP(model,
    **shared_fsdp_kwargs)`: the wrap is given `device_id`, written in the dict (where a rule reports
    it and a fix edits it); a keyword of the call itself wins; an entry assigned before the call
    (`changed["device_id"] = local_rank`) is given as assigned there. Near miss: a dict the model
    does not know."""
    program = program_of("""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    def main(model, rank, local_rank, options):
        shared = dict(device_id=rank, limit_all_gathers=False)
        FSDP(model, **shared)
        literal = {"device_id": rank, "sync_module_states": True}
        FSDP(model, sync_module_states=False, **literal)
        changed = dict(device_id=rank)
        changed["device_id"] = local_rank
        FSDP(model, **changed)
        FSDP(model, **options)
    """)
    main = flow_of(program, "main")
    wraps = list(main.of_kind(model.WRAP))
    given = [wrap.argument(None, "device_id") for wrap in wraps]
    assert [type(node).__name__ if node is not None else None for node, _ in filter(None, given)] == ["Name", "Name", "Name"]
    assert [found is not None for found in given] == [True, True, True, False]
    file = wraps[0].file
    assert file.code(given[2][0]) == "local_rank" and file.position(given[2][0]).start.line == file.position(wraps[2].node).start.line - 1
    assert file.code(given[0][0]) == "rank" and file.position(given[0][0]).start.line == file.position(wraps[0].node).start.line - 1
    assert wraps[1].argument(None, "sync_module_states")[1].constant == "False"  # the call's own, written there
    assert wraps[1].file.code(wraps[1].argument(None, "sync_module_states")[0]) == "False"


def test_a_dict_written_out_passes_its_entries_as_keywords():
    """tiny-grpo: `training_config = {"num_iterations": 1, ...}; train(loader, **training_config)`. The
    parameter holds 1, and a parameter not in the dict keeps its default. A dict given entries the
    model reads (`d["k"] = v`, `d.update({...}, k=v)`, through another name: PyTorch's FSDP example's
    `train_kwargs.update(cuda_kwargs)`) holds them. Near misses: a dict changed in ways the model cannot
    read (`d.update(other)`, `d[key] = v`, handed to a function), also on one path only (`if resume:
    d[k] = v`, where the last path walked is the one that left it as written; in a loop that may not
    run), and `**kwargs` the model does not know, where no default is trusted either."""
    program = program_of("""
    def train(num_iterations, shuffle=True):
        range(num_iterations)
        log(shuffle)
    def literal():
        config = {"num_iterations": 1}
        train(**config)
    def called():
        train(**dict(num_iterations=1, shuffle=False))
    def assigned():
        config = {"num_iterations": 1}
        config["num_iterations"] = 5
        train(**config)
    def updated():
        config = {"num_iterations": 1}
        cuda_config = {"shuffle": False}
        alias = config
        alias.update(cuda_config, num_iterations=2)
        train(**config)
    def updated_unknown():
        config = {"num_iterations": 1}
        config.update(other)
        train(**config)
    def assigned_unknown(key):
        config = {"num_iterations": 1}
        config[key] = 5
        train(**config)
    def in_loop(epochs):
        config = {"num_iterations": 1}
        for epoch in range(epochs):
            config["num_iterations"] = 5
        train(**config)
    def on_one_path(resume):
        config = {"num_iterations": 1}
        if resume:
            config["shuffle"] = False
        train(**config)
    def handed():
        config = {"num_iterations": 1}
        alias = config
        prepare(alias)
        train(**config)
    def read():
        config = {"num_iterations": 1}
        config.get("num_iterations")
        train(**config)
    def unknown(kwargs):
        train(**kwargs)
    """)
    def given(name):
        return [event.args[0].constant for event in flow_of(program, name).events
                if type(event.node) is cst.Call and model.dotted_name(event.node.func) in ("range", "log")]
    assert given("literal") == ["1", "True"] and given("called") == ["1", "False"] and given("read") == ["1", "True"]
    assert given("assigned") == ["5", "True"] and given("updated") == ["2", "False"]
    assert given("updated_unknown") == given("assigned_unknown") == given("on_one_path") == given("handed") == given("unknown") == [None, None]
    assert given("in_loop")[-2:] == [None, None]


def test_a_torch_dtype_is_known_through_names_tables_and_tests():
    """pytorch_transformer: `ptdtype = {..., "float16": torch.float16}[name]` is one of three dtypes, and
    `ptdtype == "float16"` compares a dtype with a string: false whatever runs, so `if` on it takes no
    branch. Near misses: `ptdtype == torch.float16` (may hold), a table with an entry that is no dtype,
    and a name assigned twice."""
    program = program_of("""
    import torch
    def main(name, other):
        ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
        half = {"fp16": torch.half, "fp32": torch.float}["fp16"]
        either = torch.bfloat16 if other else torch.float16
        mixed = {"fp16": torch.float16, "auto": "auto"}[name]
        twice = torch.float16
        twice = other
        log(ptdtype, half, either, mixed, twice)
        log(ptdtype == "float16", ptdtype == torch.float16, half == torch.bfloat16, mixed == "auto")
        if ptdtype == "float16":
            log(never)
    """)
    logged = [event for event in flow_of(program, "main").events if type(event.node) is cst.Call and model.dotted_name(event.node.func) == "log"]
    assert [value.dtypes for value in logged[0].args] == [
        frozenset({"torch.float32", "torch.bfloat16", "torch.float16"}), frozenset({"torch.float16"}),
        frozenset({"torch.bfloat16", "torch.float16"}), None, None]
    assert [value.always_false for value in logged[1].args] == [True, False, True, False]
    assert len(logged) == 2  # the body of `if ptdtype == "float16":` is never walked


def test_a_function_another_function_walked_gets_no_flow_of_its_own():
    """`build` is walked in `main`'s flow, with what `main` gives it: no flow of its own among the
    run's flows (a rule may still ask for it). Near misses: `main`, called only by the module body,
    and `unused`, called by nothing, keep theirs; so does a helper whose only caller ran past its budget."""
    program = program_of("""
    from torch.distributed.fsdp import fully_shard

    def build(model):
        fully_shard(model)

    def unused(model):
        fully_shard(model)

    def main(model):
        build(model)

    main(Net())
    """)
    assert sorted(flow.function.name if flow.function else "<module>" for flow in program.flows) == ["<module>", "main", "unused"]
    [build] = [info for info in program.files[0].functions.values() if info.name == "build"]
    assert [event.kind for event in program.flow_of(build).events] == [model.SHARD]
    calls = "\n".join(f"    part{i} = middle(model)" for i in range(model.FLOW_BUDGET // 100))
    program = program_of(f"""
from torch.distributed.fsdp import fully_shard

def helper(model):
    fully_shard(model)

def middle(model):
{chr(10).join(f"    x{i} = model.layer{i}" for i in range(60))}

def main(model):
    helper(model)
{calls}
""")
    assert "helper" in [flow.function.name for flow in program.flows if flow.function]


def test_a_module_init_keeps_wrapped_in_an_attribute_is_that_wrap_in_every_other_method():
    """oumi: `self.model = FSDP(model, ...)` in `__init__` on every path: in `step`, `self.model` is
    managed by that wrap. Near misses: a wrap under a test in `__init__`, an attribute `__init__` gives
    another object afterwards, and a wrap in a method other than `__init__` bound to an attribute. (An
    attribute given the module the wrap was given holds it wrapped: `self.inner = other` after
    `FSDP(other)`, whose `parameters()` are the same flat shards as the wrapper's, checked with torch.)"""
    program = program_of("""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    class Trainer:
        def __init__(self, model, other, use_fsdp):
            self.model = FSDP(model)
            if use_fsdp:
                self.maybe = FSDP(other)
            self.replaced = FSDP(other)
            self.replaced = Net()
            self.inner = other
        def setup(self, model):
            self.late = FSDP(model)
        def step(self):
            self.model.parameters()
            self.maybe.parameters()
            self.replaced.parameters()
            self.late.parameters()
            self.inner.parameters()
    """)
    step = flow_of(program, "Trainer.step")
    uses = [event for event in step.events if event.kind == model.METHOD and event.method == "parameters"]
    assert [step.sharding_of(event.target, event.index, fsdp=1) is not None for event in uses] == [True, False, False, False, True]


def test_isinstance_of_fsdp_is_false_for_a_module_the_flow_built_and_never_sharded():
    """physicsnemo: `is_distributed = isinstance(model, FSDPModule)` of a plain `nn.Linear` handed to
    the helper: false, and `if is_distributed:` takes no branch. Near misses: the same module once
    sharded, a module that arrives as a parameter, and one handed to code the run cannot see."""
    program = program_of("""
    import torch.nn as nn
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel as FSDP, fully_shard

    def check(model):
        return isinstance(model, (FSDP, FSDPModule))

    def main(given):
        plain = nn.Linear(2, 2)
        log(check(plain))
        log(check(given))
        handed = nn.Linear(2, 2)
        prepare(handed)
        log(check(handed))
        sharded = nn.Linear(2, 2)
        fully_shard(sharded)
        log(check(sharded))
    """)
    logged = [event for event in flow_of(program, "main").events if type(event.node) is cst.Call and model.dotted_name(event.node.func) == "log"]
    assert [event.args[0].always_false for event in logged] == [True, False, False, False]


def test_a_method_that_asks_whether_an_attribute_is_sharded_while_the_run_is_walked():
    """torchtitan, xtuner and 20 more: `isinstance(self.model, FSDPModule)` in a method asked what the
    class shards before the program knew it, and the model of the whole group failed. Asked during the
    walk, the class's shards are not known yet: the test is one the model cannot answer."""
    program = program_of("""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    class Trainer:
        def __init__(self, model):
            self.model = fully_shard(model)
        def step(self):
            if isinstance(self.model, FSDPModule):
                self.model.reshard()
    """)
    assert flow_of(program, "Trainer.step").type_tested


def test_a_class_defined_in_a_method_has_its_constructors_facts():
    """accelerate's tests define `class Model(nn.Module)` inside a test method: the method's class is
    known by its qualified name (`Tests.test.Model`), its bases and constructor too."""
    program = program_of("""
    import torch.nn as nn

    class Tests:
        def test(self):
            class Model(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.ready = False

                def forward(self, x):
                    if self.ready:
                        return x
                    return None

            return Model()
    """)
    forward = flow_of(program, "Tests.test.Model.forward")
    assert not forward.exhausted


def test_what_holds_where_an_event_runs_after_an_early_return_and_in_an_elif():
    program = program_of("""
    from torch.distributed.fsdp import fully_shard

    def main(args, model):
        if not args.fsdp:
            return model
        if args.a:
            pass
        elif args.b:
            fully_shard(model.head)
        fully_shard(model)
    """)
    head, root = flow_of(program, "main").of_kind(model.SHARD)
    assert head.conditions() == {("args.fsdp", True), ("args.a", False), ("args.b", True)}
    assert root.conditions() == {("args.fsdp", True)}


def test_what_holds_names_the_object_a_test_reads_whatever_it_is_called():
    """`if c.fsdp:` in a callee where `c = config` and the caller passed its `cfg`: the fact is of the
    caller's `cfg.fsdp`, as the caller's own `if cfg.fsdp:` is; a name the walk never bound (a global)
    stays as written."""
    program = program_of("""
    from torch.distributed.fsdp import fully_shard

    def shard(model, config):
        c = config
        if c.fsdp and not GLOBAL.off:
            fully_shard(model)

    def main(cfg, model):
        if cfg.fsdp:
            shard(model, cfg)
    """)
    [event] = flow_of(program, "main").of_kind(model.SHARD)
    assert event.conditions() == {("cfg.fsdp", True), ("GLOBAL.off", False), ("cfg.fsdp and not GLOBAL.off", True)}


def test_a_name_each_path_gives_a_wrapped_module_is_wrapped_where_the_paths_meet():
    """allenai/OLMoASR: `if resume: model, ... = load_ckpt(...)` (which wraps the model it builds) `else:
    model = FSDP(model)`: after the `if`, `model` is a new value, one of the two, and wrapped on both
    paths. Near misses: one path leaves the module plain, or one path gives it no object at all."""
    program = program_of("""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    def load(path):
        model = FSDP(Net())
        return model, 1

    def main(resume, net, other, third):
        if resume:
            model, step = load("ckpt")
        else:
            model = FSDP(net)
        model.parameters()
        if resume:
            plain, step = load("ckpt")
        else:
            plain = other
        plain.parameters()
        if resume:
            maybe = FSDP(third)
        else:
            maybe = None
        maybe.parameters()
    """)
    main = flow_of(program, "main")
    uses = [event for event in main.events if event.kind == model.METHOD and event.method == "parameters"]
    assert [main.sharding_of(event.target, event.index, fsdp=1) is not None for event in uses] == [True, False, False]
    assert len(main.joined[uses[0].target.root]) == 2  # the object `load` returned, and `FSDP(net)`'s


def test_an_attribute_an_object_was_constructed_with_is_the_object_the_call_gave():
    """JHNMACHINE/harold's shape: the trainer reaches the wrapped model as `state.model`, where `state =
    Holder(model)` and the constructor stores its parameter. Near misses: the attribute assigned
    again after the construction, and the object handed to code the run cannot see."""
    program = program_of("""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    class Holder:
        def __init__(self, model, step=0):
            self.model = model
            self.step = step

    def main(net, fresh):
        model = FSDP(net)
        state = Holder(model)
        state.model.parameters()
        other = Holder(model)
        other.model = fresh
        other.model.parameters()
        third = Holder(model)
        unknown_library(third)
        third.model.parameters()
    """)
    main = flow_of(program, "main")
    uses = [event for event in main.events if event.kind == model.METHOD and event.method == "parameters"]
    assert uses[0].target == model.Ref("net")  # `FSDP(net)` wraps the object `net` names
    assert [main.sharding_of(event.target, event.index, fsdp=1) is not None for event in uses] == [True, False, False]


def test_a_dataclass_field_holds_the_object_its_construction_gave():
    """JHNMACHINE/harold's own shape: `state = TrainState(model=model, step=0)` of a `@dataclass` with no
    `__init__` of its own: the generated one stores each field. Near misses: a field `__post_init__`
    assigns again, a dataclass asked for no `__init__`, and a plain class (no generated `__init__`)."""
    program = program_of("""
    import dataclasses
    from dataclasses import dataclass, field
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    @dataclass
    class TrainState:
        model: object
        optimizer: object = None
        step: int = 0
        history: list = field(default_factory=list)

    @dataclasses.dataclass
    class Rebuilt:
        model: object
        def __post_init__(self):
            self.model = make()

    @dataclass(init=False)
    class Manual:
        model: object

    class Plain:
        model: object

    def main(net):
        model = FSDP(net)
        state = TrainState(model=model)
        state.model.parameters()
        positional = TrainState(model, None)
        positional.model.parameters()
        rebuilt = Rebuilt(model)
        rebuilt.model.parameters()
        manual = Manual(model)
        manual.model.parameters()
        plain = Plain(model)
        plain.model.parameters()
    """)
    main = flow_of(program, "main")
    uses = [event for event in main.events if event.kind == model.METHOD and event.method == "parameters"]
    assert [main.sharding_of(event.target, event.index, fsdp=1) is not None for event in uses] == [True, True, False, False, False]


def test_a_compiled_module_is_the_module_it_runs():
    """damcuong8/translate_vi_en_bidir: `model = wrap_model_with_fsdp(model, config)`, then `model =
    torch.compile(model)` under `if compile:`: the OptimizedModule's parameters and attributes are the
    FSDP module's, so `clip_grad_norm_(model.parameters())` clips a sharded module's on both paths;
    so does a module compiled before it is wrapped. Near miss: a compiled deep copy, whose parameters
    are its own."""
    program = program_of("""
    import copy
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    def main(net, other, compile):
        model = FSDP(net)
        if compile:
            model = torch.compile(model)
        model.parameters()
        early = torch.compile(other)
        wrapped = FSDP(early)
        other.parameters()
        twin = torch.compile(copy.deepcopy(model))
        twin.parameters()
    """)
    main = flow_of(program, "main")
    uses = [event for event in main.events if event.kind == model.METHOD and event.method == "parameters"]
    assert [main.sharding_of(event.target, event.index, fsdp=1) is not None for event in uses] == [True, True, False]


def test_a_forward_method_a_class_registers_in_one_method_runs_hooks_in_the_others():
    """allenai/olmoearth_pretrain: `apply_fsdp` shards `self.patch_embeddings` and registers its
    `forward` (`register_fsdp_forward_method`); `forward`, another method nothing in the run calls
    after it, calls `self.patch_embeddings.forward(...)`, which runs the hooks. Near misses: another
    attribute, another method, a local module."""
    program = program_of("""
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    class Encoder(nn.Module):
        def forward(self, x, net):
            self.patch_embeddings.forward(x)
            self.head.forward(x)
            self.patch_embeddings.encode(x)
            net.forward(x)

        def apply_fsdp(self, method):
            fully_shard(self.patch_embeddings)
            register_fsdp_forward_method(self.patch_embeddings, "forward")
            register_fsdp_forward_method(self.head, method)  # a name not known: no registration read
            fully_shard(self.head)
            fully_shard(self)
    """)
    forward = flow_of(program, "Encoder.forward")
    calls = [event for event in forward.events if event.kind == model.METHOD]
    assert [forward.runs_hooks(event.target, event.method) for event in calls] == [True, False, False, False]


def test_a_process_that_enters_a_loop_nothing_leaves_never_reaches_its_end():
    """NVlabs/rcm's build_synthetic_dataset.py: `main` starts the group in `init()` and ends with
    `barrier()`, a helper that is `while True: time.sleep(interval)`; so does a `try` without handlers.
    Near misses: the helper called under an `if`, a loop with a `break`, a loop the helper enters only
    under an `if`, and a `try` whose handler goes on past the loop (Wan2.1's `mp_worker`)."""
    program = program_of("""
    import time
    import torch.distributed as dist

    def init():
        if dist.is_available():
            dist.init_process_group("nccl")

    def barrier(interval=1):
        while True:
            time.sleep(interval)

    def maybe_barrier(wait):
        if wait:
            while True:
                time.sleep(1)

    def until_done():
        while True:
            if time.time() > 0:
                break

    def forever():
        init()
        print("done")
        barrier()

    def sometimes(args):
        init()
        if args.wait:
            barrier()

    def leaves():
        init()
        until_done()

    def inner_if(args):
        init()
        maybe_barrier(args.wait)

    def handled():
        init()
        try:
            barrier()
        except Exception:
            return

    def caught_around_both():
        try:
            init()
            barrier()
        except Exception:
            return

    def finally_only():
        init()
        try:
            barrier()
        finally:
            print("stopped")
    """)
    def result(name):
        flow = flow_of(program, name)
        [init] = [event for event in flow.events if event.qname == "torch.distributed.init_process_group"]
        return flow.runs_forever_after(init)
    assert [result(name) for name in ("forever", "sometimes", "leaves", "inner_if", "handled", "caught_around_both", "finally_only")] == \
        [True, False, False, False, False, False, True]


def test_a_comparison_of_two_strings_known_whole_takes_one_arm():
    """tinuademargaret/minifsdp: `init_process(fn=main, backend="nccl", device="cuda")` of a function
    that starts the group in each of `if device == "mps":`, `elif device == "cuda":` and `else:`: in that
    call only the CUDA arm runs, and `!=` reads the same way. Near misses: a string the model does not
    know whole (an f-string of a rank), and an unknown one."""
    program = program_of("""
    import torch.distributed as dist

    def init_process(backend="gloo", device=None):
        if device == "mps":
            dist.init_process_group(backend=backend)
        elif device == "cuda":
            dist.init_process_group(backend=backend)
        else:
            dist.init_process_group(backend)
        if device != "cuda":
            dist.barrier()

    def main(rank, other):
        init_process(backend="nccl", device="cuda")
        init_process(device=f"cuda:{rank}")
        init_process(device=other)
    """)
    main = flow_of(program, "main")
    lines = [[main.file.position(event.node).start.line for event in main.events if event.kind == model.CALL and event.call_sites
              and event.call_sites[0] is call.node] for call in main.events if call.kind == model.ENTER]
    assert lines == [[8], [6, 8, 10, 12], [6, 8, 10, 12]]


def test_a_module_fully_shard_manages_is_no_fsdp1_wrapper():
    """saforem2/ezpz's diffusion example: `is_fsdp = isinstance(model, FSDP)` (FSDP1's class) of a model
    `fully_shard` sharded, then `FSDP.summon_full_params(model) if is_fsdp else nullcontext()`: the test
    is false, and the side of the conditional expression that does not run makes no event. Near
    misses: `isinstance(model, FSDPModule)` of it (true: only its side runs), the FSDP1 test of a
    wrapped module (true), and of a module the model knows nothing of (either side may run)."""
    program = program_of("""
    from contextlib import nullcontext
    import lib
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel as FSDP, fully_shard

    def main(model, other, unknown):
        fully_shard(model)
        is_fsdp = isinstance(model, FSDP)
        FSDP.summon_full_params(model) if is_fsdp else nullcontext()
        model.unshard() if isinstance(model, FSDPModule) else lib.plain_one()
        other = FSDP(other)
        FSDP.summon_full_params(other) if isinstance(other, FSDP) else lib.plain_two()
        lib.unknown_one() if isinstance(unknown, FSDP) else lib.unknown_two()
    """)
    main = flow_of(program, "main")
    called = [event.method or event.qname.rsplit(".", 1)[-1] for event in main.events
              if event.kind in (model.CALL, model.METHOD) and event.qname != "isinstance"]
    assert called == ["nullcontext", "unshard", "summon_full_params", "unknown_one", "unknown_two"]


def test_an_fsdp_class_imported_with_a_fallback_is_there_for_its_modules():
    """joeyllm/models-magpie: `try: from torch.distributed.fsdp import FullyShardedDataParallel as FSDP`
    `except ImportError: FSDP = None`, then `use_fsdp = FSDP is not None and isinstance(model, FSDP)` of
    a module the flow wrapped: an object of the class exists only where the import worked, so the test
    holds and its `else` never runs. Near misses: the same test of a module the model knows nothing of
    (either arm may run), and `is not None` of another name imported with a fallback (not known)."""
    program = program_of("""
    import lib
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from other_lib import helper
    except ImportError:
        FSDP = None
        helper = None

    def main(model, unknown):
        model = FSDP(model)
        use_fsdp = FSDP is not None and isinstance(model, FSDP)
        if use_fsdp:
            lib.wrapped_one()
        else:
            lib.plain_one()
        if FSDP is not None and isinstance(unknown, FSDP):
            lib.wrapped_two()
        else:
            lib.plain_two()
        if helper is not None:
            lib.with_helper()
    """)
    main = flow_of(program, "main")
    called = [event.qname.rsplit(".", 1)[-1] for event in main.events if event.kind == model.CALL and event.qname.startswith("lib.")]
    assert called == ["wrapped_one", "wrapped_two", "plain_two", "with_helper"]


def test_the_pair_get_state_dict_returns_holds_the_model_s_state_first():
    """`model_sd, optim_sd = get_state_dict(model, optimizers)`: the first is the module's (sharded)
    state, read from its parameters, as `get_model_state_dict(model)` is; the second is not."""
    program = program_of("""
    import lib
    from torch.distributed.checkpoint.state_dict import get_state_dict

    def main(model, optimizer):
        model_sd, optim_sd = get_state_dict(model, optimizer)
        lib.keep(model_sd, optim_sd)
    """)
    [kept] = [event for event in flow_of(program, "main").events if event.qname == "lib.keep"]
    assert [sorted(ref.root for ref in arg.params_of) for arg in kept.args] == [["model"], []]


def test_a_global_the_module_binds_once_to_the_rank_is_that_rank_in_its_functions():
    """michaelnny/InstructLLaMA: `rank = int(os.environ["RANK"])` at the top of the script, read by
    `fsdp_main()` and handed to a helper that moves a tensor `.to(rank)`: the global rank, in any
    function or method that binds no `rank` of its own. Near misses: a name the module binds twice,
    one a function declares `global` (and may bind again), one the function binds itself (known by its
    name only, as before: some rank) or an enclosing function binds (its value there), one bound to
    no rank (named like one: some rank)."""
    program = program_of("""
    import os
    import lib
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    node = dist.get_rank()
    twice = int(os.environ["RANK"])
    twice = 0
    changed = int(os.environ["RANK"])
    my_rank = compute()

    def reset():
        global changed
        changed = 0

    class Trainer:
        def step(self):
            lib.use(rank, local_rank, node, twice, changed, my_rank)

    def main():
        lib.use(rank, local_rank, node, twice, changed, my_rank)
        def inner():
            lib.use(local_rank)
        local_rank = 3
        inner()
    """)
    def scopes(function):
        [use] = [event for event in flow_of(program, function).events if event.qname == "lib.use"][:1]
        return [arg.rank.scope.value if arg.rank else None for arg in use.args]
    assert scopes("Trainer.step") == ["global", "local", "global", None, None, "some"]
    assert scopes("main") == ["global", "some", "global", None, None, "some"]
    [inner] = [event for event in flow_of(program, "main").events if event.qname == "lib.use"][1:]
    assert inner.args[0].rank is None  # main's own `local_rank`, 3 where `inner()` runs


def test_what_built_an_object_is_read_where_it_is_asked():
    """physicsnemo's ViT example: `model = spec.build(...)`, `fully_shard(model)` under `if args.fsdp:`,
    `model = DDP(model, ...)` in the `elif` (the same variable: computed from it), `model =
    torch.compile(model)` last. Where it is sharded, the model was built by `build`, not by `DDP`
    (a layer of torch.nn, which would hold no blocks)."""
    from fsdplint.model.modules import holds_no_blocks

    program = program_of("""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.fsdp import fully_shard

    def main(spec, args):
        model = spec.build()
        if args.fsdp:
            fully_shard(model)
        elif args.ddp:
            model = DDP(model)
        model = torch.compile(model)
    """)
    main = flow_of(program, "main")
    [shard] = main.of_kind(model.SHARD)
    root = shard.target.root
    assert main.constructor(root, shard.index) is None  # `spec.build()`: a call the model cannot name
    assert main.constructor(root) == "torch.nn.parallel.DistributedDataParallel"
    assert not holds_no_blocks(main, shard.target, shard.index + 1)


def test_a_name_the_paths_bound_to_different_parts_is_one_of_them():
    """bionemo's esm2 test: `transformer_layers` is `model.model.encoder.layers` in one arm and
    `model.esm.encoder.layer` in the other: an element of it is an element of either (FSDP101 then
    sees the model's layers sharded before it: tests/test_model.py). Near miss: a list of its own."""
    source = """
    from torch.distributed.fsdp import fully_shard

    def main(use_te, build, other):
        model = build()
        if use_te:
            layers = model.model.encoder.layers
        else:
            layers = model.esm.encoder.layer
        for layer in layers:
            fully_shard(layer)
        fully_shard(model)
        for layer in other:
            fully_shard(layer)
        fully_shard(build())
    """
    main = flow_of(program_of(source), "main")
    first, _, third, _ = main.of_kind(model.SHARD)
    assert main.alternatives(first.target) == (model.Ref("model", ("model", "encoder", "layers", "[]")), model.Ref("model", ("esm", "encoder", "layer", "[]")))
    assert main.alternatives(third.target) == (third.target,)


def test_a_function_defined_in_its_caller_reads_the_callers_names():
    """karlstratos/minGPU: `def wrap_fsdp(model, sync_module_states=False):` inside `main` builds
    `dict(device_id=rank, ...)` from `main`'s `rank`, read from `RANK`: the global rank. Near misses:
    a name the nested function binds itself, and a function defined elsewhere, whose free name is a
    global the model does not know."""
    program = program_of("""
    import os
    import torch

    def helper():
        torch.cuda.set_device(rank)

    def main():
        rank = int(os.environ["RANK"])
        local = int(os.environ["LOCAL_RANK"])

        def wrap():
            torch.cuda.set_device(rank)

        def own():
            rank = 0
            torch.cuda.set_device(rank)

        wrap()
        own()
        helper()
    """)
    main = flow_of(program, "main")
    devices = [event.args[0] for event in main.events if event.qname == "torch.cuda.set_device"]
    assert [value.rank is not None and value.rank.scope is model.GLOBAL_RANK for value in devices] == [True, False, False]


@pytest.mark.parametrize("elsewhere, expected", [
    ("pass", [True, False, True]),
    # R3-v2's own class reads a flag of `self` with `getattr`, which assigns nothing.
    ("getattr(self, 'flag', False)", [True, False, True]),
    # Near miss: `self` handed to code that may assign `self.config`: the test is not known to be the same.
    ("configure(self)", [True, True, True]),
])
def test_a_class_wraps_its_module_only_under_its_constructors_tests(elsewhere, expected):
    """zuohao123/R3-v2: `__init__` keeps `config` in `self.config` and calls `self._wrap_fsdp()`, which
    wraps `self.qwen.model`, only `if config.backend == "fsdp":`; `_clip_gradients` clips the FSDP module
    in that case and returns, and clips plain parameters past it, where the module was never wrapped.
    Near miss: a method under no test of the backend."""
    program = program_of(f"""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    class Holder:
        def __init__(self):
            self.model = torch.nn.Linear(8, 8)

    class Trainer:
        def __init__(self, config):
            self.config = config
            self.qwen = Holder()
            if self.config.backend == "fsdp":
                self._wrap_fsdp()

        def _wrap_fsdp(self):
            self.qwen.model = FSDP(self.qwen.model)

        def _clip_gradients(self):
            if self.config.backend == "fsdp":
                self.qwen.model.clip_grad_norm_(1.0)
                return
            self.qwen.model.parameters()

        def anywhere(self):
            self.qwen.model.parameters()

        def log(self):
            {elsewhere}
    """)
    clip = flow_of(program, "Trainer._clip_gradients")
    anywhere = flow_of(program, "Trainer.anywhere")
    uses = [(flow, event) for flow in (clip, anywhere) for event in flow.events if event.kind == model.METHOD]
    assert [flow.sharding_of(event.target, event.index, fsdp=1) is not None for flow, event in uses] == expected


def test_a_rank_returned_local_on_one_path_and_global_on_another_is_some_rank():
    """facebookresearch/MobileLLM's `get_local_rank`: `LOCAL_RANK` when set, else `dist.get_rank()`:
    which rank the result is depends on the path. Near miss: the same scope on both paths."""
    program = program_of("""
    import os
    import torch
    import torch.distributed as dist

    def get_local_rank():
        if os.environ.get("LOCAL_RANK"):
            return int(os.environ["LOCAL_RANK"])
        return dist.get_rank()

    def get_global_rank():
        if os.environ.get("RANK"):
            return int(os.environ["RANK"])
        return dist.get_rank()

    def main():
        torch.cuda.set_device(get_local_rank())
        torch.cuda.set_device(get_global_rank())
    """)
    main = flow_of(program, "main")
    scopes = [event.args[0].rank.scope for event in main.events if event.qname == "torch.cuda.set_device"]
    assert scopes == [model.SOME_RANK, model.GLOBAL_RANK]


def test_a_variable_bound_to_ranks_of_two_scopes_on_two_paths_is_some_rank():
    """DNALongBench's `local_rank = init_distributed()` (LOCAL_RANK), else `local_rank =
    args.local_rank` (an attribute named a rank): a rank on every path, which one depends on the path,
    as for a function's returns. Near misses: the same scope on both paths, and a rank on one path
    with a value of unknown meaning on the other (nothing is known of it)."""
    program = program_of("""
    import os
    import torch
    import torch.distributed as dist

    def main(args, other):
        local_rank = int(os.environ["LOCAL_RANK"])
        if args.local_rank != -1:
            local_rank = args.local_rank
        torch.cuda.set_device(local_rank)
        global_rank = dist.get_rank()
        if args.rank_given:
            global_rank = int(os.environ["RANK"])
        torch.cuda.set_device(global_rank)
        either = dist.get_rank()
        if other:
            either = other.index
        torch.cuda.set_device(either)
    """)
    main = flow_of(program, "main")
    ranks = [event.args[0].rank for event in main.events if event.qname == "torch.cuda.set_device"]
    assert [rank.scope if rank else None for rank in ranks] == [model.SOME_RANK, model.GLOBAL_RANK, None]


def test_flags_are_read_as_what_they_were_computed_from():
    """karlstratos/minGPU: `is_ddp = is_distributed and args.dist == "ddp"`, `is_fsdp = is_distributed and
    args.dist == "fsdp"`: the wrap under `if is_fsdp:` and the state dict under `if (not is_distributed)
    or is_ddp:` (and `if is_ddp` of an `x if is_ddp else y`) never run in one execution; one subject
    equals one literal at most. Near miss: a flag computed from something else."""
    program = program_of("""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    def main(args, world_size, model, other):
        is_distributed = world_size != -1
        is_ddp = is_distributed and args.dist == 'ddp'
        is_fsdp = (is_distributed and args.dist == "fsdp")
        unrelated = args.other == "fsdp"
        if is_fsdp:
            model = FSDP(model)
        if unrelated:
            other = FSDP(other)
        if (not is_distributed) or is_ddp:
            state = model.module.state_dict() if is_ddp else model.state_dict()
            other.state_dict()
    """)
    main = flow_of(program, "main")
    wrap, wrap_other = main.of_kind(model.WRAP)
    uses = [event for event in main.events if event.kind == model.METHOD and event.method == "state_dict"]
    assert [wrap.excludes(use) for use in uses] == [True, True, True]
    assert not wrap_other.excludes(uses[2])
    assert [main.sharding_of(use.target, use.index, fsdp=1) is not None for use in uses] == [False, False, True]


def test_facts_hold_together_unless_no_truth_of_their_atoms_makes_them_all_hold():
    from fsdplint.model.conditions import can_hold_together

    dist, flag = model.Ref("args", ("dist",)), model.Ref("flag")
    fsdp, ddp = ("eq", dist, "'fsdp'"), ("eq", dist, "'ddp'")
    assert not can_hold_together(((fsdp, True),), ((ddp, True),))
    assert can_hold_together(((fsdp, False),), ((ddp, False),))
    assert not can_hold_together(((("and", flag, fsdp), True),), ((("or", ("not", flag), ddp), True),))
    assert can_hold_together(((("or", flag, fsdp), True),), ((ddp, True),))
    assert can_hold_together(((flag, True),), ((ddp, True),))  # nothing shared: each holds on its own path
    chain = tuple((("or", model.Ref(f"v{i}"), model.Ref(f"v{i + 1}")), True) for i in range(20))
    assert can_hold_together(((fsdp, True),) + chain, ((ddp, True), (model.Ref("v0"), True)))  # too many atoms to tell


def test_comparisons_of_one_number_hold_together_only_where_one_number_meets_them():
    """deepmd-kit's `stage > 0` (sharding enabled) false and `stage >= 2` (parameters sharded) true
    never hold together; a subject equal to a number meets its comparisons with it. A set of facts
    holds on its own unless its parts that share atoms contradict each other (`can_hold`)."""
    from fsdplint.model.conditions import can_hold, can_hold_together

    stage, flag = model.Ref("policy", ("stage",)), model.Ref("flag")
    enabled, shards = ("cmp", stage, (">", 0)), ("cmp", stage, (">=", 2))
    assert not can_hold_together(((enabled, False),), ((shards, True),))
    assert can_hold_together(((enabled, True),), ((shards, False),))  # stage 1
    assert not can_hold_together(((("eq", stage, "1"), True),), ((shards, True),))
    assert can_hold_together(((("eq", stage, "3"), True),), ((shards, True),))
    assert can_hold_together(((("eq", stage, "'zero'"), True),), ((shards, True),))  # no number: not weighed
    assert not can_hold(((("not", enabled), True), (flag, True), (("and", flag, shards), True)))
    assert can_hold(((("not", enabled), True), (flag, True), (("or", flag, shards), True)))


def test_a_property_of_an_attribute_the_constructor_builds_is_read_as_the_test_it_returns():
    """deepmd-kit's `self.sharding.enabled`, where the constructor keeps `ShardingPolicy.from_params(...)`
    (a classmethod that returns an object of its class) in `self.sharding` and `enabled` returns
    `self.stage > 0`: the fact of the event under it is that test of `self.sharding`; and the
    constructor's guard clauses hold in every other method. Near misses: a property that returns a
    call, and an attribute another method assigns again (its class not known)."""
    program = program_of("""
    import lib

    class Policy:
        def __init__(self, stage):
            self.stage = stage

        @classmethod
        def build(cls, stage):
            policy = cls(stage)
            return policy if stage else cls(0)

        @property
        def enabled(self):
            return self.stage > 0

        @property
        def busy(self):
            return lib.busy(self.stage)

    class Trainer:
        def __init__(self, stage, other):
            self.policy = Policy.build(stage)
            self.other = Policy(other)
            self.resume = lib.flag()
            if self.policy.enabled and self.resume:
                raise ValueError("not both")

        def reset(self):
            self.other = Policy(0)

        def step(self):
            if self.policy.enabled:
                lib.first()
            if self.policy.busy:
                lib.second()
            if self.other.enabled:
                lib.third()
    """)
    step = flow_of(program, "Trainer.step")
    facts = {event.qname: [render(formula) for formula, _ in event.facts] for event in step.events if event.qname in ("lib.first", "lib.second", "lib.third")}
    built = "self.policy.stage > 0 and self.resume"  # false once the constructor returned, in every method
    assert facts == {"lib.first": [built, "self.policy.stage > 0"], "lib.second": [built, "self.policy.busy"], "lib.third": [built, "self.other.enabled"]}
    walker = model.walker.Walker(step, step.file, step.function, {}, "", ("step",), 0)
    assert [(render(formula), holds) for formula, holds in walker.constructor_facts(step.file, "Trainer", model.Ref("t"))] == \
        [("t.policy.stage > 0 and t.resume", False)]


def test_a_sharding_test_of_a_module_the_flow_shards_holds_and_its_other_arm_does_not_run():
    """physicsnemo: `if not _is_distributed_model(model): inner.load_state_dict(torch.load(path))`, where
    `_is_distributed_model` returns True `if isinstance(model, (FSDP, FSDPModule))` and the caller shards
    `model` first: the load does not run for it. A function that returns True on one path and falls
    off the end on the other returns no constant. Near miss: a model the flow never shards."""
    source = """
    import torch
    from torch.distributed.fsdp import fully_shard, FSDPModule

    def is_distributed(model):
        if isinstance(model, FSDPModule):
            return True
        return False

    def maybe_true(flag):
        if flag:
            return True

    def load(model, flag):
        if not is_distributed(model):
            model.load_state_dict(torch.load("w.pt"))
        if not maybe_true(flag):
            model.train()

    def main(model, flag):
        {shard}
        load(model, flag)
    """
    sharded = flow_of(program_of(source.format(shard="fully_shard(model)")), "main")
    assert [event.method for event in sharded.of_kind(model.METHOD)] == ["train"]
    plain = flow_of(program_of(source.format(shard="pass")), "main")
    assert [event.method for event in plain.of_kind(model.METHOD)] == ["load_state_dict", "train"]


@pytest.mark.parametrize("iterable, derived", [
    # rosinality/halite: a comprehension over the model's blocks on one path, a caller's function of
    # the model on the other.
    ("[(i, block, None) for i, block in model.blocks.items()] if blocks is None else blocks(model)", True),
    ("[(i, block, None) for i, block in model.blocks.items()]", True),
    ("blocks(model)", True),
    # Near miss: a list written out of modules built here: each part is what the list holds.
    ("[(0, torch.nn.Linear(2, 2), None)]", False),
])
def test_the_parts_of_an_element_of_unknown_shape_come_from_what_the_iterable_came_from(iterable, derived):
    program = program_of(f"""
    import torch
    from torch.distributed.fsdp import fully_shard

    def apply_fsdp(model, blocks=None):
        iterator = {iterable}
        for i, block, _ in iterator:
            fully_shard(block)
    """)
    flow = flow_of(program, "apply_fsdp")
    [shard] = flow.shard_events(fsdp=2)
    assert ("model" in flow.computed_from(shard.target.root)) is derived


def test_a_value_is_computed_from_what_its_sources_were_computed_from():
    """`out = model(x); loss = criterion(out, y)`: the loss comes from the model, through `out`. Near
    miss: a value computed from another model only."""
    program = program_of("""
    def train(model, other, criterion, x, y):
        out = model(x)
        loss = criterion(out, y)
        elsewhere = other(x).sum()
    """)
    flow = flow_of(program, "train")
    assert "model" in flow.computed_from("loss")
    assert "model" not in flow.computed_from("elsewhere")


def test_what_a_function_returns_is_none_on_some_ranks_where_it_returns_none_under_a_rank_test():
    """Gaolingx/open-r1's `get_gathered_state_dict`: the state dict on rank 0, None on the others.
    Near misses: None under a test every rank sees alike, and a rank test of the caller's around the call."""
    program = program_of("""
    import torch
    import torch.distributed as dist

    def on_rank0(sd):
        if dist.get_rank() == 0:
            return sd
        return None

    def when_given(sd, path):
        if path is None:
            return None
        return sd

    def main(sd, path):
        torch.save(on_rank0(sd), path)
        torch.save(when_given(sd, path), path)
        if dist.get_rank() == 0:
            torch.save(when_given(sd, path), path)
    """)
    main = flow_of(program, "main")
    saved = [event.args[0].none_on_some_ranks for event in main.of_kind(model.CALL) if event.qname == "torch.save"]
    assert saved == [True, False, False]


def test_an_element_of_a_container_returned_beside_a_none_of_rank_zero_is_no_object_known():
    """RLLaVA's `dist_batch`: rank 0 returns None where the data ran out; every rank returns its part
    of the list broadcast, which is None there too. Near miss: an object built in the function."""
    program = program_of("""
    import torch
    import torch.distributed as dist

    def part(iterator, rank):
        shards = [None] * dist.get_world_size()
        if dist.get_rank() == 0:
            try:
                shards = list(next(iterator))
            except StopIteration:
                dist.broadcast_object_list(shards, src=0)
                return None
        dist.broadcast_object_list(shards, src=0)
        return shards[rank]

    def built(iterator, rank):
        if dist.get_rank() == 0:
            return None
        return torch.zeros(rank)

    def main(iterator, path):
        torch.save(part(iterator, dist.get_rank()), path)
        torch.save(built(iterator, dist.get_rank()), path)
    """)
    main = flow_of(program, "main")
    saved = [event.args[0].none_on_some_ranks for event in main.of_kind(model.CALL) if event.qname == "torch.save"]
    assert saved == [False, True]


# C-W-D/CasCoD: the caller's `train_config` class, re-exported by its package, is tested in the callee
# under the caller's name. Near misses: an object the caller made, and an imported object that is no
# class of the run: the callee's own parameter.
@pytest.mark.parametrize("passed", ["train_config", "Config()", "DEFAULTS"])
@pytest.mark.parametrize("package, imported, twin, found", [
    ("pkg/configs", "pkg.configs", None, True),
    ("src/configs", "src.configs", None, True),  # C-W-D/CasCoD's `src` has no `__init__.py`
    # UNITES-Lab/MoE-RBench: a package of one name beside the script (`from configs import train_config`),
    # and another project of the repository with its own.
    ("configs", "configs", None, True),
    ("configs", "configs", "safety/configs", True),
    # Near misses: a package that only ends in the name imported is another one; two projects'
    # packages of that name, neither on the script's path.
    ("other/configs", "configs", None, False),
    ("robustness/configs", "configs", "safety/configs", False),
])
def test_a_parameter_given_a_class_is_that_class(tmp_path, passed, package, imported, twin, found):
    texts = {
        f"{package}/__init__.py": "from .training import DEFAULTS, Config, train_config\n",
        f"{package}/training.py": "class train_config:\n    enable_fsdp = False\n\nclass Config:\n    enable_fsdp = False\n\n"
                                  "DEFAULTS = Config()\n",
        "train.py": f"import torch\nfrom {imported} import DEFAULTS, Config, train_config\n\ndef train(cfg):\n    if cfg.enable_fsdp:\n"
                    f"        torch.save({{}}, 'x')\n\ndef main():\n    train({passed})\n",
    }
    if package.startswith(("pkg/", "other/")):
        texts[package.split("/")[0] + "/__init__.py"] = ""
    if twin:
        texts.update({f"{twin}/__init__.py": texts[f"{package}/__init__.py"], f"{twin}/training.py": texts[f"{package}/training.py"]})
    main = flow_of(program_on_disk(tmp_path, texts), "main")
    [save] = [event for event in main.of_kind(model.CALL) if event.qname == "torch.save"]
    [(text, truth)] = save.conditions()
    expected = "train_config.enable_fsdp" if passed == "train_config" and found else ":cfg.enable_fsdp"
    assert text.endswith(expected) and (":" in text) == (":" in expected) and truth


# Coldra1n/CS-Master_Thesis: an object the caller imports from a module no file of the run is (a
# config the run cannot open) is one object too, tested in the callee under the caller's name. Near
# misses: the callee's file names another object `train_config` (its own import, or a global of its
# own), whose tests of `train_config.x` are of that object.
@pytest.mark.parametrize("callee_binds, linked", [
    ("from other_configs import train_config\n", False),
    ("train_config = None\n", False),
    ("from configs import train_config\n", True),
    ("", True),
])
def test_a_parameter_is_not_named_as_an_object_the_callees_file_names_otherwise(tmp_path, callee_binds, linked):
    texts = {
        "steps.py": f"import torch\n{callee_binds}\ndef train(cfg):\n    if cfg.enable_fsdp:\n        torch.save({{}}, 'x')\n",
        "train.py": "import torch.distributed\nfrom configs import train_config\nfrom steps import train\n\ndef main():\n    train(train_config)\n",
    }
    main = flow_of(program_on_disk(tmp_path, texts), "main")
    [save] = [event for event in main.of_kind(model.CALL) if event.qname == "torch.save"]
    [(text, truth)] = save.conditions()
    assert text.endswith(":cfg.enable_fsdp" if not linked else "train_config.enable_fsdp") and (":" in text) is not linked


@pytest.mark.parametrize("configured, sharded", [
    # nanoGPT's configurator (magicsquares137/luvai): the file run may set `use_fsdp` again.
    ('exec(open("configurator.py").read())', True),
    ('exec(open("configurator.py").read(), globals())', True),
    # Near misses: code run in a namespace of its own, and none run: `use_fsdp` stays False.
    ('exec(open("configurator.py").read(), overrides)', False),
    ('print(open("configurator.py").read())', False),
])
def test_a_global_set_before_exec_in_the_modules_own_names_is_not_a_constant(configured, sharded):
    program = program_of(f"""
    import torch
    from torch.distributed.fsdp import fully_shard

    use_fsdp = False
    overrides = {{}}
    {configured}
    model = torch.nn.Linear(4, 4)
    if use_fsdp:
        fully_shard(model)
    """)
    assert bool(events(flow_of(program, None), model.SHARD)) == sharded


@pytest.mark.parametrize("calls, managed", [
    # run-house/kubetorch-examples: the trainer's `setup()` wraps a local model into `self.model`; the
    # caller's `trainer.model` is that wrap in the step it calls next.
    ("trainer.setup(model)\n        trainer.step()", True),
    # Near miss: the step runs before the setup.
    ("trainer.step()\n        trainer.setup(model)", False),
])
def test_a_wrap_a_method_binds_to_an_attribute_of_self_is_the_callers_objects(calls, managed):
    program = program_of(f"""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    class Trainer:
        def setup(self, model):
            wrapped = torch.nn.Sequential(model)
            self.model = FSDP(wrapped)
        def step(self):
            self.model.parameters()

    def main(model):
        trainer = Trainer()
        {calls}
    """)
    main = flow_of(program, "main")
    [use] = [event for event in main.events if event.kind == model.METHOD and event.method == "parameters"]
    assert use.target == model.Ref("trainer", ("model",))
    assert (main.sharding_of(use.target, use.index, fsdp=1) is not None) == managed


@pytest.mark.parametrize("base_assigns, facts", [
    # deepmd-kit's pt_expt trainer: `class Trainer(AbstractTrainer)`, the base imported through its
    # package's re-export (`from deep.train import Base`), assigns none of what the constructor's guard clause
    # tests: the clause holds in every method.
    ("self.steps = 0", [("self.policy.stage > 0 and self.resume", False)]),
    # Near miss: the base assigns one of them again: not known.
    ("self.resume = True", []),
])
def test_a_base_a_package_re_exports_is_read_for_what_the_constructor_keeps(tmp_path, base_assigns, facts):
    texts = {
        "deep/__init__.py": "",
        "deep/train/__init__.py": "from .base import Base\n",
        "deep/train/base.py": f"from abc import ABC\n\nclass Base(ABC):\n    def reset(self):\n        {base_assigns}\n",
        "train.py": "import lib\nfrom deep.train import Base\n\nclass Policy:\n    def __init__(self, stage):\n        self.stage = stage\n\n"
                    "    @property\n    def enabled(self):\n        return self.stage > 0\n\n"
                    "class Trainer(Base):\n    def __init__(self, stage):\n        self.policy = Policy(stage)\n        self.resume = lib.flag()\n"
                    "        if self.policy.enabled and self.resume:\n            raise ValueError('not both')\n\n"
                    "    def step(self):\n        lib.go()\n",
    }
    program = program_on_disk(tmp_path, texts)
    [go] = [event for event in flow_of(program, "Trainer.step").events if event.qname == "lib.go"]
    assert [(render(formula), holds) for formula, holds in go.facts] == facts


@pytest.mark.parametrize("taken_where_unsharded, sharded", [
    # deepmd-kit's `_collect_checkpoint_states`: the module's own `state_dict()` only in the arm where
    # its parameters are not sharded (the other arm gathers a full state dict); the dict saved past
    # the `if` holds no sharded state, though the module is sharded on the other path.
    (True, []),
    # Near miss: the state taken in the arm where the module is sharded.
    (False, ["model"]),
])
def test_a_state_dict_says_where_its_state_was_taken(taken_where_unsharded, sharded):
    program = program_of(f"""
    import lib
    import torch
    from torch.distributed.fsdp import fully_shard

    def save(model, shards):
        if shards:
            fully_shard(model)
        if {"" if taken_where_unsharded else "not "}shards:
            state = lib.gather(model)
        else:
            state = model.state_dict()
        torch.save({{"model": state}}, "m.pt")
    """)
    flow = flow_of(program, "save")
    [taken] = [event for event in flow.events if event.method == "state_dict"]
    [save] = [event for event in flow.events if event.qname == "torch.save"]
    assert save.args[0].params_read == (taken,)
    assert [module.name for module, _ in flow.sharded_state(save.args[0], save.index)] == sharded


@pytest.mark.parametrize("iterated, targets", [
    # A progress bar visits what it wraps: each block, then (a literal's elements in order) the root.
    ("tqdm(model.layers)", ["model.layers.[]"]),
    ("tqdm([model.encoder, model])", ["model.encoder", "model"]),
    # Near miss: a function of a library that takes the blocks: what it yields is not known (the loop variable itself).
    ("lib.pick(model.layers)", ["block"]),
])
def test_a_progress_bar_visits_what_it_wraps(iterated, targets):
    program = program_of(f"""
    import lib
    from torch.distributed.fsdp import fully_shard
    from tqdm.auto import tqdm

    def shard(model):
        for block in {iterated}:
            fully_shard(block)
    """)
    shards = [event for event in flow_of(program, "shard").events if event.kind is model.SHARD]
    assert [target.dotted() for event in shards for target in event.targets] == targets


@pytest.mark.parametrize("start_first, started_past", [
    # compose-rl's launcher: the group started past the guard, the collective in a helper it calls.
    (False, True),
    # Near miss: the group of every process started before the guard.
    (True, False),
])
def test_a_group_started_past_a_rank_guard(start_first, started_past):
    start = "dist.init_process_group('gloo', world_size=nodes, rank=node_rank)"
    program = program_of(f"""
    import os
    import torch.distributed as dist

    def send(x):
        dist.broadcast(x, src=0)

    def launch(x, nodes, node_rank):
        {start if start_first else "pass"}
        if int(os.environ["LOCAL_RANK"]) != 0:
            return
        {"pass" if start_first else start}
        send(x)
    """)
    flow = flow_of(program, "launch")
    [broadcast] = [event for event in flow.events if event.qname == "torch.distributed.broadcast"]
    [guard] = broadcast.rank_guards
    assert flow.group_started_past(guard, broadcast) is started_past


@pytest.mark.parametrize("built, wrapped, params", [
    # hongyihuang/llama2.c: nanoGPT's `model = Transformer(args).cuda()`, then the optimizer built by
    # `model.configure_optimizers(...)`, a method of the file's class.
    ("Transformer().cuda()", False, ["model"]),
    ("Transformer().to('cuda').train()", False, ["model"]),
    ("Transformer()", False, ["model"]),
    # krishna1803/nanoGPT: `model = FSDP(model, ...)` first: FSDP1's wrap hands the method to the
    # module it wraps, `self` in it being that module.
    ("Transformer()", True, ["model.module"]),
    # Near miss: an object a library's function builds: its methods are not the file's class's.
    ("lib.build().cuda()", False, None),
    ("lib.build()", True, None),
])
def test_a_method_of_an_object_moved_as_built_or_wrapped_by_fsdp1_is_its_classs(built, wrapped, params):
    program = program_of(f"""
    import lib
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    class Transformer(torch.nn.Module):
        def configure_optimizers(self, lr):
            return torch.optim.AdamW(self.parameters(), lr=lr)

    model = {built}
    {"model = FSDP(model, auto_wrap_policy=lib.policy)" if wrapped else "pass"}
    optimizer = model.configure_optimizers(1e-3)
    """)
    flow = flow_of(program, None)
    optimizers = [event for event in flow.events if event.kind is model.OPTIMIZER]
    assert [sorted(ref.dotted() for ref in event.params_of) for event in optimizers] == ([params] if params else [])


@pytest.mark.parametrize("divisor, guarded", [
    # Whose turn it is, round the ranks: every rank passes in its own turns.
    ("world_size", False),
    ("int(os.environ['WORLD_SIZE'])", False),
    # Near miss: turns of two, which a rank past the second never has.
    ("2", True),
])
def test_a_rank_compared_with_whose_turn_it_is_is_no_guard(divisor, guarded):
    program = program_of(f"""
    import os
    import torch.distributed as dist

    def evaluate(examples, x):
        rank, world_size = dist.get_rank(), dist.get_world_size()
        for i, example in enumerate(examples):
            if i % {divisor} == rank:
                dist.all_reduce(x)
    """)
    [reduce] = [event for event in flow_of(program, "evaluate").events if event.qname == "torch.distributed.all_reduce"]
    assert bool(reduce.rank_guards) is guarded


@pytest.mark.parametrize("alone, guarded", [
    # Sethu-madhav/GPT2: `fsdp_world_size = int(os.environ['WORLD_SIZE'])` where the run is distributed,
    # `fsdp_world_size = 1` where not: the world size where it differs from the literal.
    ("1", False),
    # Near miss: a count a library's function gives, not known to be the world size.
    ("lib.count()", True),
])
def test_the_world_size_on_one_path_and_a_literal_on_the_other_is_the_world_size(alone, guarded):
    program = program_of(f"""
    import os
    import lib
    import torch.distributed as dist

    def evaluate(examples, x):
        if int(os.environ.get("RANK", -1)) != -1:
            rank = int(os.environ["RANK"])
            world_size = int(os.environ["WORLD_SIZE"])
        else:
            rank = 0
            world_size = {alone}
        for i, example in enumerate(examples):
            if i % world_size == rank:
                dist.all_reduce(x)
    """)
    [reduce] = [event for event in flow_of(program, "evaluate").events if event.qname == "torch.distributed.all_reduce"]
    assert bool(reduce.rank_guards) is guarded


@pytest.mark.parametrize("built, params", [
    # nanoGPT's `configure_optimizers` (hongyihuang/llama2.c): a dict of the parameters by name,
    # filtered, its items split into groups.
    ("d = {n: p for n, p in self.named_parameters()}\n            d = {n: p for n, p in d.items() if p.requires_grad}\n"
     "            groups = [{'params': [p for n, p in d.items() if p.dim() >= 2]}]\n            opt = torch.optim.AdamW(groups)", ["self"]),
    ("d = {n: p for n, p in self.named_parameters()}\n            opt = torch.optim.AdamW(list(d.values()))", ["self"]),
    # Near miss: a dict of the names only.
    ("d = {n: 0 for n, p in self.named_parameters()}\n            opt = torch.optim.AdamW(list(d.values()))", []),
])
def test_a_dict_of_the_parameters_holds_them(built, params):
    program = program_of(f"""
    import torch

    class Net(torch.nn.Module):
        def configure(self):
            {built}
    """)
    [optimizer] = [event for event in flow_of(program, "Net.configure").events if event.kind is model.OPTIMIZER]
    assert sorted(ref.dotted() for ref in optimizer.params_of) == params


@pytest.mark.parametrize("sharder, targets, mesh", [
    # sanketpurandare/playground, torchtitan's older `_apply_fsdp`: `shard = functools.partial(fully_shard,
    # mesh=mesh)`, then `shard(block)`: `fully_shard(block, mesh=mesh)`.
    ("functools.partial(fully_shard, mesh=mesh)", ["model.layers.[]", "model"], "mesh"),
    ("partial(fully_shard, mesh=mesh, reshard_after_forward=True)", ["model.layers.[]", "model"], "mesh"),
    # Near miss: a partial of a function of the run, whose body the walk does not follow through it.
    ("partial(own_shard, mesh=mesh)", [], None),
])
def test_a_partial_of_fully_shard_shards(sharder, targets, mesh):
    program = program_of(f"""
    import functools
    from functools import partial
    from torch.distributed.fsdp import fully_shard

    def own_shard(module, mesh):
        return module

    def apply_fsdp(model, mesh):
        shard = {sharder}
        for block in model.layers:
            shard(block)
        shard(model)
    """)
    flow = flow_of(program, "apply_fsdp")
    shards = [event for event in flow.events if event.kind is model.SHARD]
    assert [target.dotted() for event in shards for target in event.targets] == targets
    assert {cst.Module([]).code_for_node(event.argument(None, "mesh")[0]) for event in shards} == ({mesh} if mesh else set())


@pytest.mark.parametrize("second, entered", [
    # Exclusive arms that each build the trainer: the method is known where every arm's class has it.
    ("    else:\n        trainer = FSDPTrainer(None)", ["FSDPTrainer.train"]),
    # Objects of two classes: which method runs is not known (not the last arm's).
    ("    else:\n        trainer = DDPTrainer(cfg)", []),
    # Near miss: one binding after the other on every path: the last one's.
    ("    trainer = DDPTrainer(cfg)", ["DDPTrainer.train"]),
])
def test_a_method_of_an_object_built_in_exclusive_arms_is_each_arms_class(second, entered):
    classes = "".join(f"class {name}:\n    def __init__(self, cfg):\n        self.cfg = cfg\n    def train(self):\n        return 1\n\n"
                      for name in ("FSDPTrainer", "DDPTrainer"))
    program = program_of(f"{classes}def main(cfg, fsdp):\n    if fsdp:\n        trainer = FSDPTrainer(cfg)\n{second}\n    trainer.train()\n")
    flow = flow_of(program, "main")
    assert [event.qname for event in flow.events if event.kind is model.ENTER and event.qname.endswith(".train")] == entered


@pytest.mark.parametrize("constructor, elsewhere, made", [
    # The constructor's top-level statement builds it: that call, in the constructor's flow.
    ("        self.scaler = GradScaler()\n", "", "torch.amp.GradScaler"),
    # Near misses: built in one arm only, or assigned again by another method: not known.
    ("        if cfg:\n            self.scaler = GradScaler()\n", "", None),
    ("        self.scaler = GradScaler()\n", "    def reset(self):\n        self.scaler = ShardedGradScaler()\n", None),
])
def test_an_attribute_its_objects_constructor_built_is_made_there(constructor, elsewhere, made):
    program = program_of("from torch.amp import GradScaler\n"
                         "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n\n"
                         "class Trainer:\n    def __init__(self, cfg):\n" + constructor + elsewhere +
                         "    def step(self, loss):\n        self.scaler.step(loss)\n\n"
                         "def main(cfg):\n    trainer = Trainer(cfg)\n    trainer.scaler.step(None)\n")
    for function, receiver in (("main", "trainer"), ("Trainer.step", "self")):
        flow = flow_of(program, function)
        [step] = [event for event in flow.events if event.kind is model.METHOD and event.method == "step"]
        assert step.target == model.Ref(receiver, ("scaler",))
        found = flow.made_by_constructor(step.target, step.index)
        assert (found[1].qname if found else None) == made
        assert found is None or found[0].function.qualname == "Trainer.__init__"


@pytest.mark.parametrize("returned, entered", [
    # A classmethod that returns an object of its class builds one: its methods are the class's.
    ("cls(cfg)", ["GPT.configure_optimizers"]),
    # Near miss: one that returns something else builds no object of the class.
    ("load(cfg)", []),
])
def test_an_object_a_classmethod_factory_built_has_its_classs_methods(returned, entered):
    program = program_of(f"""
        class GPT:
            def __init__(self, cfg):
                self.cfg = cfg

            @classmethod
            def from_pretrained(cls, cfg):
                return {returned}

            def configure_optimizers(self):
                return 1

        def main(cfg, scratch):
            if scratch:
                model = GPT(cfg)
            else:
                model = GPT.from_pretrained(cfg)
            model.configure_optimizers()
    """)
    flow = flow_of(program, "main")
    assert [event.qname for event in flow.events if event.kind is model.ENTER and event.qname.startswith("GPT.c")] == entered


def test_a_rank_test_the_tests_around_it_decide_is_no_guard_there_and_its_walk_is_not_copied_elsewhere():
    # LightX2V's worker loop: `if self.rank == 0: raise` in a method reached only in the `else` of
    # the caller's `if node.rank == 0:` splits no ranks there; called past the `if` (the near miss),
    # rank 0 leaves it, and the walk of the first call (same arguments) is not copied into this one.
    program = program_of("""
    import os
    import torch.distributed as dist

    class Node:
        def __init__(self):
            self.rank = int(os.environ["RANK"])

        def worker_loop(self, objects):
            if self.rank == 0:
                raise RuntimeError("rank 0 leads")
            dist.broadcast_object_list(objects, src=0)

    def main(objects):
        node = Node()
        if node.rank == 0:
            dist.broadcast_object_list(objects, src=0)
        else:
            node.worker_loop(objects)
        node.worker_loop(objects)
    """)
    flow = flow_of(program, "main")
    received = [event for event in flow.events if event.qname == "torch.distributed.broadcast_object_list" and event.chain[-1] == "worker_loop"]
    assert [[guard.branch.value for guard in event.rank_guards] for event in received] == [["else"], ["after-exit"]]


@pytest.mark.parametrize("decorator, computes", [
    # plainLM's evaluation: a function decorated `@torch.no_grad()` runs its body as under the `with`.
    ("@torch.no_grad()\n", False),
    ("@torch.inference_mode()\n", False),
    # Near miss: an undecorated function computes gradients.
    ("", True),
])
def test_a_loop_in_a_function_decorated_no_grad_computes_no_gradients(decorator, computes):
    program = program_of("import torch\n\n" + decorator + "def evaluate(model, loader):\n    for batch in loader:\n        model(batch)\n\n"
                         "def main(model, loader):\n    for step in range(3):\n        evaluate(model, loader)\n")
    for function in ("main", "evaluate"):
        [inner] = [loop for loop in flow_of(program, function).loops if loop.chain[-1] == "evaluate"]
        assert inner.computes_gradients() is computes


@pytest.mark.parametrize("iterable, per_pass", [
    # LightX2V's shard plan: elements the model does not know, another one each pass.
    ("shard_plan(model)", True),
    # Near miss: a literal tuple, each element known in turn.
    ("((model.head, True), (model, False))", False),
])
def test_a_loop_variable_over_elements_not_known_is_no_object_made_here(iterable, per_pass):
    program = program_of(f"""
    from torch.distributed.fsdp import fully_shard

    def apply(model):
        for module, reshard in {iterable}:
            fully_shard(module, reshard_after_forward=reshard)

    def main(first, second):
        apply(first)
        apply(second)
    """)
    flow = flow_of(program, "main")
    shards = [event for event in flow.events if event.kind is model.SHARD]
    # The second call's walk is the first's, copied (the same context): its variable too.
    assert len(shards) == (2 if per_pass else 4)
    assert all((event.target.root in flow.per_pass) is per_pass for event in shards)
    assert not any(flow.has_local_provenance(event.target) for event in shards)


@pytest.mark.parametrize("decorator, wrapped", [
    # Coluding/diffusion-egocentric: `unet = FSDPConfig.wrap_unet(unet)`, a staticmethod called on the class.
    ("@staticmethod", True),
    ("@classmethod", True),
    # Near miss: a method of the objects, called on the class: not followed.
    ("", False),
])
def test_a_static_or_class_method_called_on_a_class_of_the_file_is_walked(decorator, wrapped):
    first = "cls, unet" if decorator == "@classmethod" else "self, unet" if not decorator else "unet"
    program = program_of(f"""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    class FSDPConfig:
        {decorator}
        def wrap_unet({first}):
            return FSDP(unet)

    def main(unet):
        unet = FSDPConfig.wrap_unet(unet)
        unet(x)
    """)
    flow = flow_of(program, "main")
    [forward] = [event for event in flow.events if event.kind is model.CALL_VALUE and event.target.root.startswith("unet")]
    assert (flow.sharding_of(forward.target, forward.index, fsdp=1) is not None) is wrapped


@pytest.mark.parametrize("constructor, caller, wrapped", [
    # The constructor wraps on every path: the object's `model` is wrapped in every method the caller runs.
    (["self.model = FSDP(model)"], [], True),
    # ... also in a method only the constructor calls.
    (["self.setup(model)"], [], True),
    # Near misses: wrapped in one arm of the constructor only (a may, as a variable joined from arms);
    # the caller put another module there since.
    (["if model.cfg:", "    self.model = FSDP(model)", "else:", "    self.model = model"], [], False),
    (["self.model = FSDP(model)"], ["trainer.model = Net()"], False),
])
def test_what_an_objects_constructor_left_sharded_is_sharded_in_the_caller(constructor, caller, wrapped):
    program = program_of("\n".join([
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP", "class Trainer:", "    def __init__(self, model):",
        *("        " + line for line in constructor), "    def setup(self, model):", "        self.model = FSDP(model)",
        "    def step(self):", "        return self.model.parameters()", "def main(model):", "    trainer = Trainer(model)",
        *("    " + line for line in caller), "    trainer.step()", ""]))
    flow = flow_of(program, "main")
    [parameters] = [event for event in flow.events if event.kind is model.METHOD and event.method == "parameters"]
    assert parameters.target == model.Ref("trainer", ("model",))
    assert (flow.sharding_of(parameters.target, parameters.index, fsdp=1) is not None) is wrapped


@pytest.mark.parametrize("call, walked", [
    ("init_logger(uses_dist, rank, device)", True),
    ("init_logger(uses_dist, dist_rank=rank, device=device, level='info')", True),
    # carbonscott/maxie's example: a call its function's signature refuses raises TypeError before
    # the body runs (an unknown keyword, required parameters left out; too many positional arguments).
    ("init_logger(fl_prefix=prefix, returns_timestamp=True)", False),
    ("init_logger(uses_dist, rank)", False),
    ("init_logger(uses_dist, rank, device, 'info', 'both', 'x')", False),
    # Near misses: a `**` argument may give what is missing; a decorated function may take other
    # arguments than its own (`@hydra.main(...) def main(cfg)`, called `main()`).
    ("init_logger(**options)", True),
    ("decorated()", True),
])
def test_a_call_its_functions_signature_refuses_is_not_walked(call, walked):
    program = program_of(f"""
    import torch.distributed as dist

    def init_logger(uses_dist, dist_rank, device, level="info", *, log_to="both"):
        if uses_dist:
            dist.broadcast_object_list([None], src=0, device=device)

    @hydra.main(config_path="conf")
    def decorated(cfg):
        init_logger(cfg.uses_dist, 0, "cuda")

    def main(uses_dist, rank, device, prefix, options):
        {call}
    """)
    flow = flow_of(program, "main")
    assert any(event.kind is model.ENTER for event in flow.events) is walked



def test_a_rank_or_a_literal_chosen_by_a_test_is_the_rank():
    """AlignmentResearch/tuned-lens's `int(os.environ["RANK"]) if dist.is_initialized() else 0`:
    where the value differs between ranks, it is the rank, as a variable bound to the rank on one
    path and to a literal on the other is. Near misses: a value the model knows nothing of on one
    side, and ranks of two scopes (a rank of some scope, as where paths join)."""
    program = program_of("""
    import os
    import torch
    import torch.distributed as dist

    def main(other):
        torch.cuda.set_device(int(os.environ["RANK"]) if dist.is_initialized() else 0)
        torch.cuda.set_device(0 if other else int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(dist.get_rank() if other else other.index)
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) if other else dist.get_rank())
    """)
    main = flow_of(program, "main")
    ranks = [event.args[0].rank for event in main.events if event.qname == "torch.cuda.set_device"]
    assert [rank.scope if rank else None for rank in ranks] == [model.GLOBAL_RANK, model.LOCAL_RANK, None, model.SOME_RANK]


def test_a_released_program_is_freed_by_reference_counting():
    """`Program.release` breaks the model's cycles, so that a unit's trees are freed as soon as the run
    drops the program, before the cyclic collector is on again (whose first pass would go over every
    node still alive): here a function that calls itself, and two that call each other (each
    `FunctionInfo.callers` holds the other)."""
    program = program_of("""
    from torch.distributed.fsdp import fully_shard

    def walk(module):
        for child in module.children():
            walk(child)
        fully_shard(module)

    def ping(n):
        return pong(n - 1) if n else 0

    def pong(n):
        return ping(n)

    def main(model):
        walk(model)
        ping(3)
    """)
    collector_was_on = gc.isenabled()
    gc.disable()
    try:
        file = weakref.ref(program.files[0])
        program.release()
        del program
        assert file() is None
    finally:
        if collector_was_on:
            gc.enable()


@pytest.mark.parametrize("moved, built", [
    ("model = model.cuda()", True),
    ("model = nn.SyncBatchNorm.convert_sync_batchnorm(model.to('cuda'))", True),
    # Near misses: what code the run cannot read gives back, and a batch norm's conversion of a part.
    ("model = library.wrap(model)", False),
    ("model = nn.SyncBatchNorm.convert_sync_batchnorm(model.head)", False),
])
def test_the_object_a_module_method_or_conversion_gives_back_is_the_one_built(moved, built):
    """Swarajnanda2021/Dinov2_modified: `student = student.cuda()`, then its batch norms converted:
    still the object `Combined(...)` built, of that class, holding what its call gave it: a module, two
    numbers (one a parameter's default), and the caller's parameter, which may be anything."""
    program = program_of(f"""
    import torch.nn as nn
    import library

    class Combined(nn.Module):
        def __init__(self, head, num_masks=6, patch_size=16, scale=None):
            super().__init__()
            self.head = head
            self.num_masks = num_masks
            self.patch_size = patch_size
            self.scale = scale

    def main(scale):
        model = Combined(nn.Linear(2, 2), patch_size=14, scale=scale)
        {moved}
        return model
    """)
    flow = flow_of(program, "main")
    found = flow.class_of_object("model", len(flow.events))
    assert (found is not None and found[1] == "Combined") == built
    holds = {"head": model.Holds.MODULE, "num_masks": model.Holds.NO_PARAMETERS, "patch_size": model.Holds.NO_PARAMETERS,
             "scale": model.Holds.UNKNOWN}
    assert flow.attribute_holdings("model", len(flow.events)) == (holds if built else {})


@pytest.mark.parametrize("test, tested", [
    ("all(not handle.uses_sharded_strategy for handle in model._all_handles)", True),
    ("model.sharding_strategy == ShardingStrategy.NO_SHARD", True),
    # Near misses: the strategy of a module no FSDP1 wrap manages (a configuration's), and another test.
    ("config.sharding_strategy == ShardingStrategy.NO_SHARD", False),
    ("model.training", False),
])
def test_a_test_of_whether_an_fsdp1_module_shards_is_a_test_the_model_cannot_answer(test, tested):
    """Edward-Sun/easy-to-hard's copy of torch's `clip_grad_norm_`: what runs under `if all_no_shard:`
    runs where the model cannot say (`Flow.under_type_test`)."""
    program = program_of(f"""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy

    def main(net, config):
        model = FSDP(net)
        if {test}:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    """)
    flow = flow_of(program, "main")
    [clip] = [event for event in flow.of_kind(model.CALL) if event.qname == "torch.nn.utils.clip_grad_norm_"]
    assert flow.under_type_test(clip) == tested



@pytest.mark.parametrize("default, test, runs", [
    ("-1.0", "norm > 0", False),
    ("0.0", "norm", False),
    ("1e-4", "norm", True),
    ("1.5", "norm >= 1", True),
    ("-1", "norm > 0", False),
])
def test_a_number_a_parameter_is_left_decides_a_test_of_it(default, test, runs):
    """kaistAI/Effects-of-Context-in-Instruction-Tuning's `clipping_norm=-1.0`: a float default, as an
    integer one, decides the test its caller leaves it to."""
    program = program_of(f"""
    import torch

    def step(model, norm={default}):
        if {test}:
            torch.nn.utils.clip_grad_norm_(model.parameters(), norm)

    def main(model):
        step(model)
    """)
    flow = flow_of(program, "main")
    assert any(event.qname == "torch.nn.utils.clip_grad_norm_" for event in flow.of_kind(model.CALL)) == runs


# azton/minimal_fsdp: `from minimal_fsdp.utilities import *`, then `setup_model(args)`, which wraps the model.
# Near misses, where which object the name is stays unknown: the name not exported (private, or left out
# of a literal `__all__`), `__all__` not a literal, the file binding the name itself, two star imports
# that may both give it, and a module of another package that only ends in the name.
@pytest.mark.parametrize("utilities, star, main_extra, wrapped", [
    ("", "from pkg.utilities import *", "", True),
    ("__all__ = ['setup_model']\n", "from pkg.utilities import *", "", True),
    ("", "from .utilities import *", "", True),
    ("", "from pkg.utilities import *\nfrom pkg.other import *", "", True),
    ("__all__ = ['get_args']\n", "from pkg.utilities import *", "", False),
    ("__all__ = names()\n", "from pkg.utilities import *", "", False),
    ("", "from pkg.utilities import *", "def setup_model(args):\n    return None\n", False),
    ("", "from pkg.utilities import *", "setup_model = print\n", False),
    ("", "from pkg.utilities import *\nfrom pkg.twin import *", "", False),
    ("", "from elsewhere.utilities import *", "", False),
])
def test_a_name_from_a_star_import_of_a_module_of_the_run_is_what_that_module_defines(tmp_path, utilities, star, main_extra, wrapped):
    defines = "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n" \
              "def setup_model(args):\n    return FSDP(torch.nn.Linear(2, 2))\n\ndef get_args():\n    return None\n"
    texts = {
        "pkg/__init__.py": "",
        "pkg/utilities.py": utilities + defines,
        "pkg/other.py": "def get_args():\n    return 1\n",
        "pkg/twin.py": defines,
        "elsewhere/__init__.py": "",
        "elsewhere/utilities.py": "",
        "pkg/train.py": f"import torch.distributed\n{star}\n{main_extra}\ndef main():\n    model = setup_model(None)\n",
    }
    main = flow_of(program_on_disk(tmp_path, texts, start="pkg/train.py"), "main")
    assert bool(list(main.of_kind(model.WRAP))) is wrapped


# jsbyun121/exploring-paths-llm (RL2): `RL2/utils/fsdp/` has no `__init__.py` but sits in the package
# `RL2.utils`, so Python imports it as the namespace package `RL2.utils.fsdp`; its `data_parallelism`
# is that module, not `RL2/utils/data_parallelism.py`, which defines a function of the same name (the
# model named it `data_parallelism` and resolved the import to the other file). Near miss: a folder
# without `__init__.py` outside any package is where module names start.
@pytest.mark.parametrize("imported, shards", [
    ("from pkg.utils.fsdp.parallel import prepare", True),
    ("from pkg.utils.parallel import prepare", False),
])
def test_a_folder_without_init_inside_a_package_is_a_namespace_package_of_it(tmp_path, imported, shards):
    texts = {
        "pkg/__init__.py": "",
        "pkg/utils/__init__.py": "",
        "pkg/utils/parallel.py": "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\ndef prepare(model):\n    return FSDP(model)\n",
        "pkg/utils/fsdp/parallel.py": "from torch.distributed.fsdp import fully_shard\n\ndef prepare(model):\n    fully_shard(model)\n    return model\n",
        "pkg/train.py": f"import torch.distributed\n{imported}\n\ndef main(model):\n    prepare(model)\n",
    }
    program = program_on_disk(tmp_path, texts, start="pkg/train.py")
    names = {file.display: file.module_name for file in program.files}
    assert names.get("pkg/utils/fsdp/parallel.py", "pkg.utils.fsdp.parallel") == "pkg.utils.fsdp.parallel"
    main = flow_of(program, "main")
    assert (bool(list(main.of_kind(model.SHARD))), bool(list(main.of_kind(model.WRAP)))) == (shards, not shards)
    from fsdplint.plan import module_name_for

    loose = tmp_path / "loose" / "tool.py"
    loose.parent.mkdir()
    loose.write_text("")
    assert module_name_for(loose) == "tool"


# Two classes of one name: the star import says which one (near miss: one its `__all__` leaves out).
@pytest.mark.parametrize("exports, found", [("", True), ("__all__ = []\n", False)])
def test_a_class_from_a_star_import_of_a_module_of_the_run_is_that_class(tmp_path, exports, found):
    texts = {
        "utils.py": exports + "class Trainer:\n    def fit(self, model):\n        model.forward(1)\n",
        "other.py": "class Trainer:\n    def fit(self, model):\n        model.eval()\n",
        "train.py": "import torch.distributed\nfrom utils import *\n\ndef main(model):\n    Trainer().fit(model)\n",
    }
    main = flow_of(program_on_disk(tmp_path, texts), "main")
    assert [event.method for event in main.of_kind(model.METHOD)] == (["forward"] if found else [])
