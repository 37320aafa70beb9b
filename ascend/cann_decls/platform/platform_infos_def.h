// bridge's declaration of CANN's platform/platform_infos_def.h (only named here): see ../README.md.
#ifndef BRIDGE_CANN_DECLS_PLATFORM_PLATFORM_INFOS_DEF_H_
#define BRIDGE_CANN_DECLS_PLATFORM_PLATFORM_INFOS_DEF_H_

namespace fe {
class PlatFormInfos;
class OptionalInfos;
}  // namespace fe

#endif  // BRIDGE_CANN_DECLS_PLATFORM_PLATFORM_INFOS_DEF_H_
