/* reft.h must compile as C (not only C++): this file is built as C99/C11. */
#include "reft/reft.h"

int reft_c_header_check(const char* socket_path) {
  reft_options o;
  reft_options_init(&o);
  o.socket_path = socket_path;
  o.job = "c-job";
  reft_client* c = 0;
  int rc = reft_connect(&o, &c);
  if (rc != REFT_OK) return rc;
  return reft_close(c);
}
