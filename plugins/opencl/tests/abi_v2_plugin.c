/* A plugin built for a future ABI major version (2). A host speaking major 1 must refuse it after
 * calling only tm_plugin_abi_version: every other function aborts, so a host test that loads this
 * library proves they are never run. */
#include <stdint.h>
#include <stdlib.h>

#include "tensormorph/c/plugin.h"

#define ABI_V2_EXPORT __attribute__((visibility("default")))

ABI_V2_EXPORT uint32_t tm_plugin_abi_version(void) { return TM_PLUGIN_ABI_VERSION_PACK(2, 0); }

ABI_V2_EXPORT const TM_PluginApi* tm_plugin_get_api(uint32_t host_major, uint32_t host_minor) {
  (void)host_major;
  (void)host_minor;
  abort(); /* a major-1 host must never get this far */
}
