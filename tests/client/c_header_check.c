/* reft.h must compile as C (not only C++): this file is built as C99/C11. */
#include "reft/reft.h"

int reft_c_header_check(const char* socket_path) {
  reft_options o;
  reft_options_init(&o);
  o.socket_path = socket_path;
  o.job = "c-job";
  reft_optimizer_step hs;
  reft_optimizer_step_init(&hs);
  if (hs.struct_size != sizeof hs || hs.beta2 != 0.999 || hs.clip_coef != 1.0 || hs.buffer != 0)
    return REFT_INTERNAL;
  reft_restore_report report;
  reft_restore_report_init(&report);
  if (report.struct_size != sizeof report || report.step != -1 || report.source[0] != 0)
    return REFT_INTERNAL;
  reft_client* c = 0;
  int rc = reft_connect(&o, &c);
  if (rc != REFT_OK) return rc;
  return reft_close(c);
}
