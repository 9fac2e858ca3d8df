// Declaration stub for the syntax check of src/metal on Linux (tests/backends/test_metal_host_source.py):
// only what metal-cpp uses, declared as Apple's SDK declares it. Not Apple's header; nothing links against it.
#pragma once

typedef int kern_return_t;
typedef unsigned int task_id_token_t;
