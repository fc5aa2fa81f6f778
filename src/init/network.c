#define _GNU_SOURCE
#include "network.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"

/** Sets `ifr` to an IPv4 address (a sockaddr_in in ifr_addr's place). */
static void put_address(struct sockaddr *into, struct in_addr address) {
  struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr = address};
  memcpy(into, &in, sizeof in);
}

static int bring_up(int sock, const char *device) {
  struct ifreq ifr = {0};
  snprintf(ifr.ifr_name, IFNAMSIZ, "%s", device);
  if (ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) return -1;
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  return ioctl(sock, SIOCSIFFLAGS, &ifr);
}

static int has_address(int sock, const char *device) {
  struct ifreq ifr = {0};
  snprintf(ifr.ifr_name, IFNAMSIZ, "%s", device);
  return ioctl(sock, SIOCGIFADDR, &ifr) == 0;
}

/** One field of `ip=` (colon-separated, may be empty) into `out`; returns the rest. */
static const char *next_field(const char *from, char *out, size_t size) {
  size_t len = strcspn(from, ": \n");
  snprintf(out, size, "%.*s", (int)(len < size ? len : size - 1), from);
  return from[len] == ':' ? from + len + 1 : from + len;
}

static void configure_from(int sock, const char *spec) {
  char client[32], server[32], gateway[32], netmask[32], hostname[64], device[IFNAMSIZ];
  spec = next_field(spec, client, sizeof client);
  spec = next_field(spec, server, sizeof server);
  spec = next_field(spec, gateway, sizeof gateway);
  spec = next_field(spec, netmask, sizeof netmask);
  spec = next_field(spec, hostname, sizeof hostname);
  next_field(spec, device, sizeof device);
  struct in_addr address, mask, via;
  if (hostname[0] && sethostname(hostname, strlen(hostname)) != 0) log_errno("cannot set the hostname %s", hostname);
  if (!device[0] || inet_pton(AF_INET, client, &address) != 1) return; // dhcp and the like: not ours to do
  if (has_address(sock, device)) return;                               // the kernel configured it
  struct ifreq ifr = {0};
  snprintf(ifr.ifr_name, IFNAMSIZ, "%s", device);
  put_address(&ifr.ifr_addr, address);
  if (ioctl(sock, SIOCSIFADDR, &ifr) != 0) {
    log_errno("cannot give %s the address %s", device, client);
    return;
  }
  if (inet_pton(AF_INET, netmask, &mask) == 1) {
    put_address(&ifr.ifr_netmask, mask);
    if (ioctl(sock, SIOCSIFNETMASK, &ifr) != 0) log_errno("cannot set the netmask of %s", device);
  }
  if (bring_up(sock, device) != 0) {
    log_errno("cannot bring %s up", device);
    return;
  }
  if (inet_pton(AF_INET, gateway, &via) == 1) {
    struct rtentry route = {0};
    put_address(&route.rt_dst, (struct in_addr){INADDR_ANY});
    put_address(&route.rt_genmask, (struct in_addr){INADDR_ANY});
    put_address(&route.rt_gateway, via);
    route.rt_flags = RTF_UP | RTF_GATEWAY;
    route.rt_dev = device;
    if (ioctl(sock, SIOCADDRT, &route) != 0) log_errno("cannot route through %s", gateway);
  }
  log_line("%s: %s/%s via %s", device, client, netmask, gateway[0] ? gateway : "-");
}

/** The first line of /etc/hostname as the hostname, if the file has one. */
static void set_hostname_from_file(void) {
  FILE *file = fopen("/etc/hostname", "r");
  if (file == NULL) return;
  char name[256];
  if (fgets(name, sizeof name, file) != NULL) {
    name[strcspn(name, " \t\r\n")] = '\0';
    if (name[0] && sethostname(name, strlen(name)) != 0) log_errno("cannot set the hostname %s", name);
  }
  fclose(file);
}

void set_up_network(void) {
  int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) {
    log_errno("no IPv4 socket");
    return;
  }
  if (bring_up(sock, "lo") != 0) log_errno("cannot bring lo up");
  set_hostname_from_file();
  char cmdline[4096] = {0};
  FILE *file = fopen("/proc/cmdline", "r");
  if (file != NULL) {
    if (fgets(cmdline, sizeof cmdline, file) == NULL) cmdline[0] = '\0';
    fclose(file);
  }
  for (char *at = cmdline; (at = strstr(at, "ip=")) != NULL; at += 3) {
    if (at == cmdline || at[-1] == ' ') configure_from(sock, at + 3);
  }
  close(sock);
}
