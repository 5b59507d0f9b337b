// TGI routes (filled in by the TGI compatibility work).
#include "server/tgi_routes.h"

namespace tern::server {

void add_tgi_routes(Router&, ServingContext&) {}

}  // namespace tern::server
