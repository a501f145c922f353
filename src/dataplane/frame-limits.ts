/** Frame sizes BPF_PROG_TEST_RUN takes (no libbpf here: the CLI names them without loading it). */

/** The shortest frame BPF_PROG_TEST_RUN accepts for XDP (an Ethernet header); shorter ones get EINVAL. */
export const ETH_HLEN = 14;
/**
 * The largest frame BPF_PROG_TEST_RUN hands whole to a plain `xdp` (not
 * `xdp.frags`) program: one 4 KiB page minus 256 bytes of XDP headroom minus
 * 320 bytes of skb_shared_info (x86-64, 4 KiB pages). Of a larger frame the
 * program sees only the first 3,520 bytes, and judges it on those (a valid
 * G-PDU comes back as drop_v4_truncated): measured on Linux 6.18 with
 * dp.run, 3,520 bytes translate and 3,521 do not. run() refuses such frames.
 */
export const TEST_RUN_MAX_FRAME = 3520;
