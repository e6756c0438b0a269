"""The one semantic model every rule reads.

For each parsed file (`files`): its imports (local name -> qualified name, `names`), its functions and
classes, and the attributes its classes assign containers to. For the whole run (`program`): one `Flow`
per module body and per function no other function's flow has walked (`flow`), holding the ordered
`Event`s of that function (`events`), made by the `walker`, which evaluates each statement into
`Value`s (`values`) and follows the calls of functions defined in the checked files into them,
arguments substituted for parameters, so that `shard_model(model)` followed by `build_optimizer(model)`
reads as one sequence even across files. A function a caller's flow has walked is analyzed there, with
what the caller gives it, and gets a flow of its own only when a rule asks for it (`Program.flow_of`).
A function is walked once per calling context; the other calls in that context get a copy of that
walk, mapped to their own arguments, variables and surroundings (`summaries`). A `functools.partial`
of a library's function given keywords only (`partial(fully_shard, mesh=mesh)`) calls that function
with them (`Value.partial_of`).

Bindings and paths. Each binding of a name to a new object is a new value (`model#2`), and where paths
meet, a name bound to different objects on them is a new value again. The arms of a branching
statement (`if`/`elif`/`else`, `match` cases, `except` handlers, a dispatch table's functions, the rest
of a block after an arm that returns or raises) are exclusive: events in different arms are never ordered against
each other (`Event.exclusive`). Loops over known values (literal tuples, `itertools.chain`, ...) visit
them in order. A flow evaluates at most `FLOW_BUDGET` expressions, and the files analyzed together spend
at most `PROGRAM_BUDGET` steps, evaluating and parsing (files that import FSDP first); past either, the
facts are unknown.

Values are tracked as `Ref`s: a root (a local name, made unique per inlined call and per binding) and
a path of attributes, where `[]` stands for any element (`model.layers[i]`, a loop variable over
`model.layers`, a module from `model.modules()`). Name resolution is done here from the import
statements, not with LibCST's ScopeProvider/QualifiedNameProvider, which cost about 0.5 s a file.

What holds where an event runs (`Event.facts`, `Event.conditions`): the tests of the `if`s (and `x if
test else y`) around it and of the `assert`s and the `if`s that leave the block before it, across
inlined calls, as formulas (`conditions`): a part that reads a variable of the walk is named by the
object it holds (`c.fsdp` where `c` is the caller's `cfg` is `cfg.fsdp`), a name bound to a test by
that test (`is_fsdp = is_distributed and args.dist == "fsdp"`), a property of an object its class's
constructor builds by the test it returns (`self.sharding.enabled`: `self.sharding.stage > 0`). A
method's walk starts from what its class's constructor guarantees (its guard clauses: `if ...: raise`).
Two events whose facts no truth of their atoms makes hold together, a subject equal to one literal at
most and one number meeting its comparisons, never run together (`Event.excludes`); an event whose own
facts cannot all hold never runs (a collective there is none, `Flow.collective`).

Ranks: values know whether they are this process's rank (`Value.rank`, with its `RankScope`) or a
condition only some ranks pass (`Value.rank_test`, by fsdplint/distributed.py's vocabulary and through
assignments and the functions of the run); each event knows the rank guards around it across inlined
calls (`Event.rank_guards`, with `Event.call_sites` for the calls that led there), and
`Flow.collective` says which events every rank must reach. A value computed from the rank says how it
differs between ranks (`Value.rank_derived`: a number, an iterable of that length, or a part picked by
the rank); `Value.world_size` marks the number of processes; `Flow.reads_rank`, a walk that read the rank.
A value that is a rank on one path (or side of `x if test else y`) and a literal on the other is the
rank; ranks read in different ways on two paths are a rank, of some scope where the scopes differ.
A comparison of the rank with whose turn it is in a loop (`i % world_size`) keeps no rank out, and a
process group started past a rank guard holds only the ranks it keeps (`Flow.group_started_past`).

State: a value holding parameters or state of modules (`Value.params_of`) says where that state was
taken (`Value.params_read`: the `state_dict()` calls), through dicts, comprehensions and the methods that
keep what a dict or tensor holds; `Flow.sharded_state` asks whether the module was sharded there. A
dict written out keeps its entries (`Value.entries`, which `f(**d)` passes as keywords) through the
entries it is given that the walk can read (`d["k"] = v`, `d.update({...})`), and loses them otherwise.

Loops: each `for`/`while` walked once is a `Loop` of its flow (`Flow.loops`), with what it iterates and
its body's events (`flow.events[first:end]`, inlined calls included). A variable each pass binds to
another element the model does not know is no one object (`Flow.per_pass`). A function decorated
`@torch.no_grad()` runs its body inside that context, as a `with` would (`Walker.walk_function`).

Objects: a method is resolved by the class that built its receiver (`Flow.origins`), a classmethod
factory's included (`Program.class_built_by_call`), and calling an object of a class of the run that
defines `__call__` runs that method; `module.apply(fn)` runs `fn` on each of the module's modules;
a parameter given a name the caller imports holds what that name holds, for a class of the run or an
object from a module outside it (`Walker.one_object`, `Walker.names_alike`); seen through the calls that give back the module
they are given (`model.cuda()`, `convert_sync_batchnorm(model)`: `Flow.constructions`); a static or
class method called on a class of the file is walked there. What an object's attributes hold from its
construction says whether they may hold parameters (`Flow.attribute_holdings`: a literal never does).
An import names the class or function of the module under a folder on the importer's path where two
projects of a repository each define one; a name taken from `from m import *` of a module of the run is
what `m` defines and exports (`Program.star_imported`). What an object's constructor built into an attribute, by
its only assignment, is
made there (`Flow.made_by_constructor`, in the constructor's flow); what it sharded on every path and
kept in an attribute (itself, through a base's constructor, or sharded in place) is sharded in the
object's attributes wherever its caller runs its methods (`Flow.sharding_of`). Code past a `raise` in
its block never runs, but under `pytest.raises` or `contextlib.suppress`. A rank test the tests around it
decide is no guard there; a walk that read them is copied only where they are the same. Whether the
process is in a process group (`dist.is_initialized()`, a name or a constructor's attribute bound to it)
is one atom of the facts (`conditions.GROUP_STARTED`): no collective runs where it is false. A test of
whether a module or tensor is sharded that the model cannot answer (`isinstance(x, DTensor)` of an
unknown object, a handle's `uses_sharded_strategy`, an FSDP1 module's `sharding_strategy`) is a
`Value.type_test`: where the code under it runs is not known (`Flow.under_type_test`). Number literals,
integers and floats, decide the tests of the names they are given (`clipping_norm=-1.0`).

The modules, one job each: `names` (qualified names), `values` (refs, values, ranks), `events` (events,
their kinds, guards and arms), `syntax` (LibCST shapes), `files` (one file's index), `flow` (one
function's events and the questions rules ask of them), `walker` (statements into events), `summaries`
(a callee's walk kept per calling context and copied into the other calls), `program`
(the run's files and flows, name resolution across files), `ranks` (which calls and variables are the
rank or the world size, by torch's and the launchers' names), `devices` (where a module is built, read
from the flows), `modules` (whether a module holds blocks to shard one by one, read from how it was built).
"""

from fsdplint.model.events import (
    ASSIGN,
    CALL,
    CALL_VALUE,
    ENTER,
    GUARD_AFTER_EXIT,
    GUARD_BODY,
    GUARD_DECORATED,
    GUARD_ELSE,
    META,
    METHOD,
    OPTIMIZER,
    SET_ENV,
    SHARD,
    WRAP,
    Event,
    RankGuard,
)
from fsdplint.model.constructors import Holds
from fsdplint.model.files import FileModel, FunctionInfo, UnparsedFile, build_file_model
from fsdplint.model.flow import Flow, Loop, Managed
from fsdplint.model.names import FSDP1_WRAPPER, FSDP2_METHODS, FSDP2_MODULE, FULLY_SHARD, canonical, dotted_name
from fsdplint.model.program import Program
from fsdplint.model.ranks import is_rank_number
from fsdplint.model.values import (
    GLOBAL_RANK,
    LOCAL_RANK,
    RANK_COUNT,
    RANK_NUMBER,
    RANK_PART,
    SOME_RANK,
    UNKNOWN_PART,
    Element,
    Rank,
    RankTest,
    Ref,
    Value,
)
from fsdplint.model.walker import FLOW_BUDGET

__all__ = [
    "ASSIGN", "CALL", "CALL_VALUE", "ENTER", "Element", "FLOW_BUDGET", "FSDP1_WRAPPER", "FSDP2_METHODS", "FSDP2_MODULE", "FULLY_SHARD", "GLOBAL_RANK", "GUARD_AFTER_EXIT",
    "GUARD_BODY", "GUARD_DECORATED", "GUARD_ELSE", "LOCAL_RANK", "Loop", "Managed", "META", "METHOD", "OPTIMIZER", "RANK_COUNT", "RANK_NUMBER", "RANK_PART", "SET_ENV", "SHARD", "SOME_RANK", "UNKNOWN_PART", "WRAP",
    "Event", "EventKind", "FileModel", "Flow", "FunctionInfo", "GuardBranch", "Holds", "Program", "Rank", "RankGuard", "RankScope", "RankTest", "Ref", "UnparsedFile", "Value", "build_file_model", "is_rank_number",
    "canonical", "dotted_name",
]
