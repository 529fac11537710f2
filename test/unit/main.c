/* The unit tests of the load direction (format/ and analysis/) on synthetic dumps built in memory:
 * no process started, no file read. Exits 1 when a check failed. */
#include "check.h"

#include <stdio.h>

unsigned long unit_checks, unit_failures;
const char *unit_case = "";

int main(void)
{
    test_format();
    test_index();
    test_analysis();
    printf("%lu checks, %lu failures\n", unit_checks, unit_failures);
    return unit_failures ? 1 : 0;
}
