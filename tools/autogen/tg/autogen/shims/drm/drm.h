/* tg-autogen shim for <drm/drm.h>.
 *
 * linux/kfd_ioctl.h includes <drm/drm.h> but uses nothing from it beyond the __u32/__u64 types and the ioctl
 * macros. Debian ships the kernel's drm.h only as libdrm-dev's /usr/include/libdrm/drm.h, so the kfd target
 * puts this folder on the include path instead of needing another package. */
#include <linux/types.h>
#include <linux/ioctl.h>
