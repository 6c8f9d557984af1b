#include <cstdio>
#include <iostream>

#include "command.h"

namespace reft::ctl {

void CtlContext::Emit(nlohmann::json doc,
                      const std::function<void(const nlohmann::json&)>& table) const {
  if (format == OutputFormat::kJson || !table) {
    if (doc.is_object()) doc["schema"] = kJsonSchemaVersion;
    std::cout << doc.dump(2) << std::endl;
  } else {
    table(doc);
    std::cout.flush();
  }
}

void CtlContext::Fail(int code, const std::string& message) {
  std::fprintf(stderr, "reftctl: %s\n", message.c_str());
  exit_code = code;
}

}  // namespace reft::ctl
