// SPDX-License-Identifier: GPL-2.0
/* ebpfkit's irqoff test module: sections of known length with hard interrupts off, or with
 * softirqs (bottom halves) off, in the context of the task that asks for one. Writing N to
 * /proc/ebpfkit_irqoff_hard (or _soft) spins N ms by the kernel's clock with interrupts
 * (softirqs) disabled; reading it gives how long the last section really lasted, in ns.
 * (Not mdelay(): its loop is calibrated at boot, which under emulation is far off.) */
#include <linux/interrupt.h>
#include <linux/kernel.h>
#include <linux/ktime.h>
#include <linux/module.h>
#include <linux/proc_fs.h>
#include <linux/uaccess.h>

#define MAX_MS 1000

static u64 hard_ns, soft_ns; /* the last section of each kind, as measured */

/* ns spent spinning for ms milliseconds */
static u64 spin(unsigned int ms)
{
	u64 start = ktime_get_ns();

	while (ktime_get_ns() - start < (u64)ms * NSEC_PER_MSEC)
		cpu_relax();
	return ktime_get_ns() - start;
}

static noinline void irqoff_test_hard(unsigned int ms)
{
	unsigned long flags;

	local_irq_save(flags);
	hard_ns = spin(ms);
	local_irq_restore(flags);
}

static noinline void irqoff_test_soft(unsigned int ms)
{
	local_bh_disable();
	soft_ns = spin(ms);
	local_bh_enable();
}

static ssize_t section_write(const char __user *buf, size_t len, void (*section)(unsigned int))
{
	unsigned int ms;
	int err = kstrtouint_from_user(buf, len, 10, &ms);

	if (err)
		return err;
	if (ms > MAX_MS)
		return -EINVAL;
	section(ms);
	return len;
}

static ssize_t hard_write(struct file *f, const char __user *buf, size_t len, loff_t *off)
{
	return section_write(buf, len, irqoff_test_hard);
}

static ssize_t soft_write(struct file *f, const char __user *buf, size_t len, loff_t *off)
{
	return section_write(buf, len, irqoff_test_soft);
}

static ssize_t measured_read(char __user *buf, size_t len, loff_t *off, u64 ns)
{
	char text[24];
	int n = scnprintf(text, sizeof(text), "%llu\n", ns);

	return simple_read_from_buffer(buf, len, off, text, n);
}

static ssize_t hard_read(struct file *f, char __user *buf, size_t len, loff_t *off)
{
	return measured_read(buf, len, off, READ_ONCE(hard_ns));
}

static ssize_t soft_read(struct file *f, char __user *buf, size_t len, loff_t *off)
{
	return measured_read(buf, len, off, READ_ONCE(soft_ns));
}

static const struct proc_ops hard_ops = { .proc_write = hard_write, .proc_read = hard_read };
static const struct proc_ops soft_ops = { .proc_write = soft_write, .proc_read = soft_read };

static int __init irqoff_test_init(void)
{
	if (!proc_create("ebpfkit_irqoff_hard", 0600, NULL, &hard_ops))
		return -ENOMEM;
	if (!proc_create("ebpfkit_irqoff_soft", 0600, NULL, &soft_ops)) {
		remove_proc_entry("ebpfkit_irqoff_hard", NULL);
		return -ENOMEM;
	}
	return 0;
}

static void __exit irqoff_test_exit(void)
{
	remove_proc_entry("ebpfkit_irqoff_soft", NULL);
	remove_proc_entry("ebpfkit_irqoff_hard", NULL);
}

module_init(irqoff_test_init);
module_exit(irqoff_test_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("ebpfkit irqoff test: interrupt-off and softirq-off sections of known length");
