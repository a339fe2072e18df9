"""Adaptive congestion control: host valves (:mod:`.valve`) and the controllers that
move them (reactive, proactive, state-aware)."""
