// The umbrella header compiles alone as C++, first and only include.
#include <ringrdma.h>

int main()
{
	return rr_version()[0] ? 0 : 1;
}
