/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: <linux/skbuff.h>'s inline helpers over struct sk_buff (vmlinux.h's). A received
 * packet's queue is recorded one above its number, so that 0 means none. */
#pragma once
#define skb_rx_queue_recorded(skb) ((skb)->queue_mapping != 0)
#define skb_get_rx_queue(skb) ((skb)->queue_mapping - 1)
#define skb_get_queue_mapping(skb) ((skb)->queue_mapping)
