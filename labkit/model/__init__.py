"""The model layer: plain data and pure functions, no side effects.

Scenario and grid files parsed into frozen dataclasses (checked by :mod:`.scenario`, with
:mod:`.checker`, :mod:`.scenario_fabric` and :mod:`.scenario_traffic`, and :mod:`.grid`;
a scenario file's shape declared once in :mod:`.scenario_doc`, in :mod:`.shapes`' terms,
which the checker and the files' JSON Schema, :mod:`.schema`, are made from; the types:
:mod:`.scenario_spec`, :mod:`.fabric_spec`), the fabric's graph (:mod:`.topo`), a
lossless fabric's plan (:mod:`.lossless`), ``algo: auto``'s models (:mod:`.autotune`),
the BPF programs' structs (:mod:`.abi`), a run's tables, summary and manifests as types
(:mod:`.tables`, :mod:`.summary`, :mod:`.manifest`; :mod:`.summary_meta`: what the
summary needs besides the tables), users' classes (:mod:`.extend`), and the traffic's
model (:mod:`.traffic`: wire formats, collective schedules, job plans in virtual time,
agent configs and results, a program's lines). Every JSON document labkit writes and
reads back (summary, manifests, agent configs and results) goes through one codec,
:mod:`.records`. Every file labkit is given is read within :mod:`.inputs`' limits (size,
encoding, nesting, YAML aliases). docs/architecture.md draws the layers.
"""
