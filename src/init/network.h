#ifndef ENVD_INIT_NETWORK_H
#define ENVD_INIT_NETWORK_H

/**
 * Brings up lo (the kernel gives it 127.0.0.1), sets the hostname from
 * /etc/hostname, and configures the interface named by the kernel command
 * line's `ip=CLIENT::GATEWAY:NETMASK:HOSTNAME:DEVICE:off` when the kernel did not
 * (Firecracker and qemu pass it; a kernel without IP_PNP ignores it).
 */
void set_up_network(void);

#endif
