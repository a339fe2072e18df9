// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Never loaded: this object exists for its BTF. A struct reaches an object's BTF only
 * when a map, global or function names it, so the ring buffer's records and the
 * senders' stamps are missing from the programs' own objects. One global per struct of
 * labkit.h puts each of them here, where tests/tier1/test_abi.py compares every one
 * with its mirror in labkit/model/abi.py.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "labkit.h"

struct lk_rule *lk_abi_rule;
struct lk_classifier_config *lk_abi_classifier_config;
struct lk_lane_counters *lk_abi_lane_counters;
struct lk_port_key *lk_abi_port_key;
struct lk_hist *lk_abi_hist;
struct lk_stamp *lk_abi_stamp;
struct lk_event *lk_abi_event;
struct lk_telemetry_config *lk_abi_telemetry_config;
struct lk_valve_lane *lk_abi_valve_lane;
struct lk_valve_config *lk_abi_valve_config;
struct lk_job_phase *lk_abi_job_phase;
struct lk_valve_counters *lk_abi_valve_counters;
struct lk_port_clock *lk_abi_port_clock;
struct lk_pause_port *lk_abi_pause_port;
struct lk_pause_queue *lk_abi_pause_queue;
struct lk_pause_hold *lk_abi_pause_hold;
struct lk_pause_event *lk_abi_pause_event;
struct lk_jobmark_config *lk_abi_jobmark_config;
struct lk_burst *lk_abi_burst;
struct lk_dctcp_sample *lk_abi_dctcp_sample;

char LICENSE[] SEC("license") = "Dual BSD/GPL";
