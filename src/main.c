/* queen: the broker's entry point. Boot reads the environment, opens the
 * store and the raft log, and runs the node loop until SIGTERM. */
#include <stdio.h>

int main(void)
{
    fprintf(stderr, "queen: not built yet\n");
    return 1;
}
