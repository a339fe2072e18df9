"""The kernel layer: the only code that changes the kernel's configuration (namespaces,
links, qdiscs, filters, BPF objects, cgroups: pyroute2, libbpf, Mininet).

The fabric (:mod:`.fabric`, :mod:`.netns`, :mod:`.tc`), the BPF binding (:mod:`.bpf`:
objects, maps, programs; over :mod:`.libbpf`, with :mod:`.attach` for links, filters and
pins, and :mod:`.btf`), every BPF object declared once (:mod:`.skeletons`) and the
programs on the fabric (:mod:`.lanes`, :mod:`.telemetry`, :mod:`.loss`, :mod:`.pauser`,
:mod:`.jobmark`), the host valves, gates and telemetry feed the controllers move and see
(:mod:`.valve`, :mod:`.gates`, :mod:`.feed`), recorders (:mod:`.capture`, :mod:`.pcap`),
and the machine's hygiene (:mod:`.registry`, :mod:`.interrupts`, :mod:`.cgroups`).
"""
