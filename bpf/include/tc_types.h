/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The kernel's types for a tc program, without CO-RE: include it instead of vmlinux.h.
 *
 * vmlinux.h marks every struct for CO-RE relocation, so each field a program reads
 * becomes a relocation, and libbpf parses the kernel's BTF (5 MB: about 10 ms) at each
 * load to resolve them. A tc program reads packet headers, laid out by the wire, and
 * __sk_buff, which the verifier rewrites: nothing there moves between kernels. Without
 * relocations, its load needs no kernel BTF, and a fabric loads one such object per
 * host and port.
 */
#ifndef __LABKIT_TC_TYPES_H
#define __LABKIT_TC_TYPES_H

#define BPF_NO_PRESERVE_ACCESS_INDEX
#include "vmlinux.h"

#endif /* __LABKIT_TC_TYPES_H */
