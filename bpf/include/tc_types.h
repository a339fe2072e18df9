/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The kernel's types without CO-RE, for a tc program that reads packet headers and
 * __sk_buff only: include it instead of vmlinux.h.
 *
 * vmlinux.h marks every struct for CO-RE relocation, so each field a program reads
 * becomes a relocation, and libbpf parses the kernel's BTF (5 MB: about 10 ms) at each
 * load to resolve them. Packet headers are laid out by the wire, and the verifier
 * rewrites __sk_buff's fields: neither moves between kernels. Without relocations, the
 * load needs no kernel BTF, and a fabric loads one such object per host and port. A
 * program that reads the kernel's own structs (sk_buff, net_device, a Qdisc: ecnmark)
 * needs CO-RE, and includes vmlinux.h.
 */
#ifndef __LABKIT_TC_TYPES_H
#define __LABKIT_TC_TYPES_H

#define BPF_NO_PRESERVE_ACCESS_INDEX
#include "vmlinux.h"

#endif /* __LABKIT_TC_TYPES_H */
